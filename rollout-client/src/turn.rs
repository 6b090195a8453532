//! A decoded response becomes a [`Turn`]: aligned ids and finite logprobs, or a typed error.
//!
//! This is the boundary of issue #1976: past this point a logprob cannot be missing, null,
//! non-finite, positive or attached to the wrong token. The checks themselves are in `validate.rs`;
//! this module decides which apply (an abort may have no logprobs, a very old server no `output_ids`)
//! and builds the turn. [`parse_single`] and [`parse_many`] go from bytes to turns.

use crate::channels::{self, Asked, Channels};
use crate::decode;
use crate::error::ResponseError;
use crate::fields::SampleStatus;
use crate::validate;
use crate::wire::{FinishReason, GenerateResponse, MetaInfo, ResponseBody, TokenLogprobs};

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
    /// The channels beside the logprobs, checked against the tokens: each one the request asked for is here.
    pub channels: Channels,
    /// The rest of `meta_info`; `output_token_logprobs`, `finish_reason` and the channels were moved out of it.
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

    /// Validates one response object against what the request asked for (`return_logprob` alone converts
    /// from a `bool`).
    pub fn from_response(
        resp: GenerateResponse,
        asked: impl Into<Asked>,
    ) -> Result<Turn, ResponseError> {
        let asked = asked.into();
        let logprobs_requested = asked.logprobs;
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
        let mut ids = resp.output_ids;
        if let Some(ids) = &mut ids {
            let output = lps
                .as_ref()
                .map(TokenLogprobs::len)
                .or(meta.completion_tokens);
            if let Some(output) = output {
                ids.drain(..validate::decode_window(ids.len(), output, meta.prompt_tokens));
            }
        }

        let (output_ids, logprobs) = match (ids, lps) {
            (_, None) if logprobs_requested => {
                if abort {
                    return Turn::empty_abort(meta, finish_reason, &asked);
                }
                return Err(ResponseError::MissingOutputLogprobs {
                    finish_reason: finish_reason.to_string(),
                });
            }
            (None, None) => {
                if abort {
                    return Turn::empty_abort(meta, finish_reason, &asked);
                }
                return Err(ResponseError::MissingOutputIds);
            }
            (Some(ids), None) => (ids, None),
            (ids, Some(lps)) => {
                let (ids, logprobs) = checked_columns(ids, lps, &meta)?;
                (ids, Some(logprobs))
            }
        };
        if !abort {
            validate::check_completion_tokens(&meta, &output_ids)?;
        }
        // An abort in the waiting queue never ran, so it has no channels.
        let ran = !(abort && output_ids.is_empty());
        let channels = channels::take(&mut meta, &asked, &output_ids, logprobs.as_deref(), ran)?;
        Ok(Turn {
            text,
            output_ids,
            logprobs,
            finish_reason,
            channels,
            meta_info: meta,
        })
    }

    /// An abort before any logprob was produced (0.5.3's "Abort before prefill", or a server that drops the key
    /// on abort) is an empty ABORTED turn: the sample keeps what it had.
    fn empty_abort(
        mut meta: MetaInfo,
        finish_reason: FinishReason,
        asked: &Asked,
    ) -> Result<Turn, ResponseError> {
        let channels = channels::take(&mut meta, asked, &[], None, false)?;
        Ok(Turn {
            text: String::new(),
            output_ids: Vec::new(),
            logprobs: asked.logprobs.then(Vec::new),
            finish_reason,
            channels,
            meta_info: meta,
        })
    }
}

/// The ids and logprobs of a response that has logprobs, checked: aligned with `output_ids` when it is
/// there, every logprob present, finite and `<= 0`, and as many as `meta_info` declares.
fn checked_columns(
    ids: Option<Vec<u32>>,
    lps: TokenLogprobs,
    meta: &MetaInfo,
) -> Result<(Vec<u32>, Vec<f32>), ResponseError> {
    // Very old servers sent no `output_ids`; the ids in the triples are then the only source, which is
    // exactly what slime reads (`item[1]`).
    let ids = match ids {
        Some(ids) => {
            validate::check_alignment(&ids, &lps)?;
            ids
        }
        None => lps.ids.clone(),
    };
    validate::check_logprobs(&lps)?;
    validate::check_declared_logprobs(meta, &lps)?;
    Ok((ids, lps.logprobs))
}

/// Decodes and validates a non-stream body that must be a single object (`n == 1`, no batch).
pub fn parse_single(body: &[u8], asked: impl Into<Asked>) -> Result<Turn, ResponseError> {
    match decode::decode_body(body)? {
        ResponseBody::One(r) => Turn::from_response(*r, asked),
        ResponseBody::Many(v) => Err(ResponseError::ExpectedObject { len: v.len() }),
    }
}

/// Decodes and validates any non-stream body: an object becomes one turn, an array one per item
/// (prompt-major for `n > 1`). An invalid item is reported with its position.
pub fn parse_many(body: &[u8], asked: impl Into<Asked>) -> Result<Vec<Turn>, ResponseError> {
    let asked = asked.into();
    decode::decode_body(body)?
        .into_vec()
        .into_iter()
        .enumerate()
        .map(|(i, r)| Turn::from_response(r, asked).map_err(|e| e.in_item(i)))
        .collect()
}
