//! The checks of issue #1976 on decoded data: ids and logprobs aligned, every logprob present, finite and `<= 0`, declared counts kept.
//!
//! Each check returns the [`ResponseError`] that names the field, index and value; `turn.rs` runs them in
//! order on a response before it becomes a `Turn`.

use crate::error::ResponseError;
use crate::wire::{MetaInfo, TokenLogprobs};

/// `output_ids` and the ids inside `output_token_logprobs` must agree one to one.
pub(crate) fn check_alignment(ids: &[u32], lps: &TokenLogprobs) -> Result<(), ResponseError> {
    if ids.len() != lps.len() {
        return Err(ResponseError::LengthMismatch {
            ids: ids.len(),
            logprobs: lps.len(),
        });
    }
    if ids != lps.ids.as_slice() {
        let index = ids
            .iter()
            .zip(&lps.ids)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(ResponseError::TokenIdMismatch {
            index,
            expected: ids[index],
            got: lps.ids[index],
        });
    }
    Ok(())
}

/// Every logprob must be present, finite and `<= 0`.
pub(crate) fn check_logprobs(lps: &TokenLogprobs) -> Result<(), ResponseError> {
    // Fast path: one branch-free pass that the compiler vectorises; NaN (null) fails `<= 0`.
    if lps
        .logprobs
        .iter()
        .all(|&x| x <= 0.0 && x != f32::NEG_INFINITY)
    {
        return Ok(());
    }
    for (index, &value) in lps.logprobs.iter().enumerate() {
        let token_id = lps.ids[index];
        if value.is_nan() {
            if lps.nulls.binary_search(&index).is_ok() {
                return Err(ResponseError::NullLogprob { index, token_id });
            }
            return Err(ResponseError::NonFiniteLogprob {
                index,
                token_id,
                value,
            });
        }
        if value.is_infinite() {
            return Err(ResponseError::NonFiniteLogprob {
                index,
                token_id,
                value,
            });
        }
        if value > 0.0 {
            return Err(ResponseError::PositiveLogprob {
                index,
                token_id,
                value,
            });
        }
    }
    Ok(())
}

/// `meta_info.output_token_logprobs_length`, when the server sends it, must count the logprob entries.
pub(crate) fn check_declared_logprobs(
    meta: &MetaInfo,
    lps: &TokenLogprobs,
) -> Result<(), ResponseError> {
    match meta.output_token_logprobs_length {
        Some(declared) if declared != lps.len() => Err(ResponseError::LogprobsLengthField {
            declared,
            actual: lps.len(),
        }),
        _ => Ok(()),
    }
}

/// How many prompt ids SGLang 0.5.3's detokenizer window holds at most (`INIT_INCREMENTAL_DETOKENIZATION_OFFSET`
/// in its `srt/managers/schedule_batch.py`).
pub(crate) const DECODE_WINDOW: usize = 5;

/// How many ids at the front of an `output_ids` of `ids` entries are SGLang 0.5.3's detokenizer window, for an
/// answer whose output is `output` tokens long and whose prompt is `prompt_tokens` long: 0.5.3 sends the ids its
/// detokenizer decodes, the last `min(prompt_tokens, 5)` prompt ids and then the output (`decode_ids` of
/// `scheduler_output_processor_mixin.py`), in a non-stream answer and in a stream's first chunk (seen on the
/// running release: `mock-server/conform/golden/0.5.3.jsonl`). Those ids are the prompt's, not generated ones:
/// the turn drops them. Only exactly that many extra ids count as the window; anything else is left for the
/// checks to refuse.
pub(crate) fn decode_window(ids: usize, output: usize, prompt_tokens: Option<usize>) -> usize {
    let window = prompt_tokens.map_or(0, |p| p.min(DECODE_WINDOW));
    if window > 0 && ids == output + window {
        window
    } else {
        0
    }
}

/// `meta_info.completion_tokens`, when the server sends it, must count `output_ids`. It catches prompt tokens
/// leaking into `output_ids` (SGLang issue #17240). Aborts may report the count inconsistently (the
/// waiting-queue path), so the caller holds only normal finishes to it.
pub(crate) fn check_completion_tokens(meta: &MetaInfo, ids: &[u32]) -> Result<(), ResponseError> {
    match meta.completion_tokens {
        Some(c) if c != ids.len() => Err(ResponseError::CompletionTokensMismatch {
            completion_tokens: c,
            ids: ids.len(),
        }),
        _ => Ok(()),
    }
}
