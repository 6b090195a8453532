//! The serde side of the logprob columns: a visitor that fills `Vec<u32>` ids and `Vec<f32>` logprobs straight from `[[lp, id, text], ...]`.
//!
//! `output_token_logprobs` and `input_token_logprobs` are most of a body, so [`TokenLogprobs`] is not derived:
//! each triple is decoded by a seed that pushes its parts into the columns, with no value per triple. This is
//! what the serde_json path uses (the fallback of `decode.rs`, and the reference the fast scanner of `fast.rs`
//! is tested against); the derived impls of `wire.rs` reach it through `MetaInfo`.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};

use crate::wire::{LogprobTriple, TokenLogprobs};

/// A top-logprob entry `[logprob|null, token_id, token_text|null]`, read as a tuple: these lists are short.
impl<'de> Deserialize<'de> for LogprobTriple {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (logprob, token_id, text) = <(Option<f32>, u32, Option<String>)>::deserialize(d)?;
        Ok(LogprobTriple {
            logprob,
            token_id,
            text,
        })
    }
}

impl<'de> Deserialize<'de> for TokenLogprobs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(TokenLogprobsVisitor)
    }
}

struct TokenLogprobsVisitor;

impl<'de> Visitor<'de> for TokenLogprobsVisitor {
    type Value = TokenLogprobs;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of [logprob, token_id, token_text] triples")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // serde_json gives no size hint; 4096-token responses need 12 doublings, which is cheap
        // next to parsing, so no guessing here.
        let cap = seq.size_hint().unwrap_or(0);
        let mut out = TokenLogprobs {
            ids: Vec::with_capacity(cap),
            logprobs: Vec::with_capacity(cap),
            nulls: Vec::new(),
        };
        while seq
            .next_element_seed(TripleSeed { out: &mut out })?
            .is_some()
        {}
        Ok(out)
    }
}

/// Decodes one triple and pushes its parts straight into the columns.
struct TripleSeed<'a> {
    out: &'a mut TokenLogprobs,
}

impl<'de> DeserializeSeed<'de> for TripleSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TripleSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a [logprob, token_id, token_text] triple")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let index = self.out.ids.len();
        // Read as f64 so an out-of-range value narrows to an infinity that validation reports,
        // instead of serde silently rejecting or clamping it.
        let logprob: Option<f64> = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let id: u32 = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(1, &self))?;
        seq.next_element::<IgnoredAny>()?
            .ok_or_else(|| de::Error::invalid_length(2, &self))?;
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(de::Error::invalid_length(4, &self));
        }
        self.out.ids.push(id);
        match logprob {
            Some(lp) => self.out.logprobs.push(lp as f32),
            None => {
                self.out.logprobs.push(f32::NAN);
                self.out.nulls.push(index);
            }
        }
        Ok(())
    }
}
