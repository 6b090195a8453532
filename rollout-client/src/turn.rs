//! Strict validation of a decoded response into a [`Turn`]: aligned ids and finite logprobs, or a typed error.
//!
//! This is the boundary of issue #1976: past this point a logprob cannot be missing, null,
//! non-finite, positive or attached to the wrong token.

use crate::error::ResponseError;
use crate::sample::SampleStatus;
use crate::wire::{self, FinishReason, GenerateResponse, MetaInfo, ResponseBody, TokenLogprobs};

/// One validated generation: the new tokens, their logprobs and why generation stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// The completion text (empty on `--skip-tokenizer-init` servers).
    pub text: String,
    pub output_ids: Vec<u32>,
    /// One finite logprob `<= 0` per entry of `output_ids`; `None` only when logprobs were not
    /// requested.
    pub logprobs: Option<Vec<f32>>,
    pub finish_reason: FinishReason,
    /// The rest of `meta_info`; `output_token_logprobs` and `finish_reason` were moved out of it.
    pub meta_info: MetaInfo,
}

impl Turn {
    /// The sample status this finish implies; `None` for an unknown finish type (slime leaves the
    /// status unchanged then).
    pub fn status(&self) -> Option<SampleStatus> {
        match self.finish_reason {
            FinishReason::Stop { .. } => Some(SampleStatus::Completed),
            FinishReason::Length { .. } => Some(SampleStatus::Truncated),
            FinishReason::Abort { .. } => Some(SampleStatus::Aborted),
            FinishReason::Other { .. } => None,
        }
    }

    pub fn is_abort(&self) -> bool {
        self.finish_reason.is_abort()
    }

    /// Validates one response object. `logprobs_requested` is the request's `return_logprob`.
    pub fn from_response(
        resp: GenerateResponse,
        logprobs_requested: bool,
    ) -> Result<Turn, ResponseError> {
        if let Some(err) = resp.error {
            return Err(ResponseError::ServerError {
                message: err.message.unwrap_or_default(),
            });
        }
        let mut meta = resp.meta_info.ok_or(ResponseError::MissingMetaInfo)?;
        let finish_reason = meta
            .finish_reason
            .take()
            .ok_or(ResponseError::MissingFinishReason)?;
        let abort = finish_reason.is_abort();
        let lps = meta.output_token_logprobs.take();
        let text = resp.text.unwrap_or_default();

        // An abort before any logprob was produced (MID "Abort before prefill", or a server that
        // drops the key on abort) is an empty ABORTED turn: the sample keeps what it had.
        let empty_abort = |meta: MetaInfo, finish_reason: FinishReason| Turn {
            text: String::new(),
            output_ids: Vec::new(),
            logprobs: logprobs_requested.then(Vec::new),
            finish_reason,
            meta_info: meta,
        };

        let (output_ids, logprobs) = match (resp.output_ids, lps) {
            (_, None) if logprobs_requested => {
                if abort {
                    return Ok(empty_abort(meta, finish_reason));
                }
                return Err(ResponseError::MissingOutputLogprobs {
                    finish_reason: finish_reason.to_string(),
                });
            }
            (None, None) => {
                if abort {
                    return Ok(empty_abort(meta, finish_reason));
                }
                return Err(ResponseError::MissingOutputIds);
            }
            (Some(ids), None) => (ids, None),
            (ids, Some(lps)) => {
                // Very old servers sent no `output_ids`; the ids in the triples are then the only
                // source, which is exactly what slime reads (`item[1]`).
                let ids = match ids {
                    Some(ids) => {
                        check_alignment(&ids, &lps)?;
                        ids
                    }
                    None => lps.ids.clone(),
                };
                check_logprobs(&lps)?;
                if let Some(declared) = meta.output_token_logprobs_length
                    && declared != lps.len()
                {
                    return Err(ResponseError::LogprobsLengthField {
                        declared,
                        actual: lps.len(),
                    });
                }
                (ids, Some(lps.logprobs))
            }
        };
        // Aborts may report completion_tokens inconsistently (the waiting-queue path), so the
        // count is only held against normal finishes. It catches prompt tokens leaking into
        // `output_ids` (SGLang issue #17240).
        if !abort
            && let Some(c) = meta.completion_tokens
            && c != output_ids.len()
        {
            return Err(ResponseError::CompletionTokensMismatch {
                completion_tokens: c,
                ids: output_ids.len(),
            });
        }
        Ok(Turn {
            text,
            output_ids,
            logprobs,
            finish_reason,
            meta_info: meta,
        })
    }
}

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

/// Decodes and validates a non-stream body that must be a single object (`n == 1`, no batch).
pub fn parse_single(body: &[u8], logprobs_requested: bool) -> Result<Turn, ResponseError> {
    match wire::decode_body(body)? {
        ResponseBody::One(r) => Turn::from_response(*r, logprobs_requested),
        ResponseBody::Many(v) => Err(ResponseError::ExpectedObject { len: v.len() }),
    }
}

/// Decodes and validates any non-stream body: an object becomes one turn, an array one per item
/// (prompt-major for `n > 1`). An invalid item is reported with its position.
pub fn parse_many(body: &[u8], logprobs_requested: bool) -> Result<Vec<Turn>, ResponseError> {
    wire::decode_body(body)?
        .into_vec()
        .into_iter()
        .enumerate()
        .map(|(i, r)| Turn::from_response(r, logprobs_requested).map_err(|e| e.in_item(i)))
        .collect()
}
