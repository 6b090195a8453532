//! Synthetic `/generate` bodies for the decode benchmark, byte-identical for the Rust and Python sides.
//!
//! The generator is deliberately simple and fully specified so anyone can rebuild the same bytes:
//! a SplitMix64 stream seeded with `seed` draws, per token, an id in `[0, 151_000)` and a logprob
//! `-(u * 12)` with `u` uniform in `[0, 1)`, rounded to f32 (models compute in f32) and written as
//! the shortest f64 text of that f32, the way SGLang's Python floats come out of
//! `tensor.tolist()` and orjson (`-0.5522000193595886`, not `-0.5522`). The body has the
//! key layout of spec section 7.1 with `return_logprob` and no top-logprobs.

use std::fmt::Write as _;

use crate::splitmix::SplitMix64;

/// Which per-token text the triples carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenText {
    /// `[lp, id, null]`: the default, and what slime requests.
    Null,
    /// `[lp, id, "<piece>"]`: with `return_text_in_logprobs`.
    Pieces,
}

const PIECES: [&str; 8] = [" the", " of", " Paris", ".", " and", " 4", "\\n", " is"];

/// A `/generate` body with `tokens` generated tokens and their logprobs.
pub fn generate_body(tokens: usize, seed: u64, text: TokenText) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed);
    let mut ids = Vec::with_capacity(tokens);
    let mut lps = Vec::with_capacity(tokens);
    for _ in 0..tokens {
        ids.push((rng.next_u64() % 151_000) as u32);
        lps.push(-(rng.next_unit() * 12.0) as f32);
    }
    let mut s = String::with_capacity(tokens * 48);
    s.push_str("{\"text\":\"");
    for &id in &ids {
        s.push_str(PIECES[id as usize % PIECES.len()]);
    }
    s.push_str("\",\"output_ids\":[");
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{id}");
    }
    let _ = write!(
        s,
        "],\"meta_info\":{{\"id\":\"5f0c1e0b9a3d4c7e8f1a2b3c4d5e6f70\",\"finish_reason\":\
         {{\"type\":\"length\",\"length\":{tokens}}},\"prompt_tokens\":512,\"weight_version\":\
         \"default\",\"input_token_logprobs\":[],\"output_token_logprobs\":["
    );
    for (i, (id, lp)) in ids.iter().zip(&lps).enumerate() {
        if i > 0 {
            s.push(',');
        }
        // serde_json's f64 formatting is the shortest round-trip text, as Python's repr.
        let lp = serde_json::to_string(&(*lp as f64)).unwrap_or_else(|_| "0.0".into());
        match text {
            TokenText::Null => {
                let _ = write!(s, "[{lp},{id},null]");
            }
            TokenText::Pieces => {
                let piece = PIECES[*id as usize % PIECES.len()];
                let _ = write!(s, "[{lp},{id},\"{piece}\"]");
            }
        }
    }
    let _ = write!(
        s,
        "],\"completion_tokens\":{tokens},\"cached_tokens\":0,\"num_retractions\":0,\
         \"reasoning_tokens\":0,\"output_token_logprobs_length\":{tokens},\"e2e_latency\":1.2345}}}}"
    );
    s.into_bytes()
}

/// Reference decoder through `serde_json::Value`, the way an untyped client reads the same data.
pub fn decode_via_value(body: &[u8]) -> Result<(Vec<u32>, Vec<f32>), serde_json::Error> {
    use serde::de::Error as _;
    let v: serde_json::Value = serde_json::from_slice(body)?;
    let items = v["meta_info"]["output_token_logprobs"]
        .as_array()
        .ok_or_else(|| serde_json::Error::custom("no output_token_logprobs"))?;
    let mut ids = Vec::with_capacity(items.len());
    let mut lps = Vec::with_capacity(items.len());
    for item in items {
        ids.push(
            item[1]
                .as_u64()
                .ok_or_else(|| serde_json::Error::custom("bad id"))? as u32,
        );
        lps.push(
            item[0]
                .as_f64()
                .ok_or_else(|| serde_json::Error::custom("bad logprob"))? as f32,
        );
    }
    Ok((ids, lps))
}
