//! The JSON pieces of an item object: logprob triples, top-logprob positions, finish reasons, written by hand
//! or through serde in SGLang's key order.

use serde::Serialize;
use serde::ser::{SerializeSeq, SerializeStruct, Serializer};

use crate::engine::{FinishReason, LogprobEntry};
use crate::model::Tokenizer;

/// The finish reason of an item that the scheduler rejected before running it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abort<'a> {
    pub message: &'a str,
    pub status_code: u16,
    pub err_type: &'a str,
}

/// A `Vec<u8>` writer for serde_json, which writes a number or a bracket at a time: short pieces are pushed byte by
/// byte instead of through a `memcpy` call each.
pub(super) struct SmallWrites<'a>(&'a mut Vec<u8>);

impl std::io::Write for SmallWrites<'_> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if buf.len() <= 16 {
            self.0.reserve(buf.len());
            for &b in buf {
                self.0.push(b);
            }
        } else {
            self.0.extend_from_slice(buf);
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes `value` as JSON with serde_json (strings with their escapes, floats, nested values).
pub(super) fn write_serde<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Serialising into a Vec cannot fail: every map key is a string and no Serialize impl errors.
    let _ = serde_json::to_writer(SmallWrites(out), value);
}

/// Writes an integer in decimal.
pub(super) fn write_int(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Writes one `[logprob, token_id, text|null]` triple: an `f32` in its shortest form (as serde_json and orjson
/// write floats) and a non-finite or missing one as `null`, as orjson does.
pub(super) fn write_triple(
    out: &mut Vec<u8>,
    logprob: Option<f32>,
    id: u32,
    tok: Option<&Tokenizer>,
) {
    out.push(b'[');
    match logprob {
        Some(lp) if lp.is_finite() => {
            out.extend_from_slice(zmij::Buffer::new().format_finite(lp).as_bytes())
        }
        _ => out.extend_from_slice(b"null"),
    }
    out.push(b',');
    write_int(out, id);
    match tok {
        Some(tok) => {
            out.push(b',');
            write_serde(out, tok.token_text(id).as_ref());
            out.push(b']');
        }
        None => out.extend_from_slice(b",null]"),
    }
}

/// `BaseFinishReason.to_json()` of `schedule_batch.py`.
pub(super) enum FinishJson<'a> {
    Engine(&'a FinishReason),
    Abort(Abort<'a>),
}

impl Serialize for FinishJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            FinishJson::Engine(reason) => match reason {
                FinishReason::Length { length } => {
                    let mut s = serializer.serialize_struct("FinishLength", 2)?;
                    s.serialize_field("type", "length")?;
                    s.serialize_field("length", length)?;
                    s.end()
                }
                FinishReason::StopToken { matched } => {
                    let mut s = serializer.serialize_struct("FinishMatchedToken", 2)?;
                    s.serialize_field("type", "stop")?;
                    s.serialize_field("matched", matched)?;
                    s.end()
                }
                FinishReason::StopStr { matched } => {
                    let mut s = serializer.serialize_struct("FinishMatchedStr", 2)?;
                    s.serialize_field("type", "stop")?;
                    s.serialize_field("matched", matched)?;
                    s.end()
                }
                FinishReason::Abort {
                    message,
                    status_code,
                    err_type,
                } => {
                    let mut s = serializer.serialize_struct("FinishAbort", 4)?;
                    s.serialize_field("type", "abort")?;
                    s.serialize_field("message", message)?;
                    s.serialize_field("status_code", status_code)?;
                    s.serialize_field("err_type", err_type)?;
                    s.end()
                }
            },
            FinishJson::Abort(abort) => {
                let mut s = serializer.serialize_struct("FinishAbort", 4)?;
                s.serialize_field("type", "abort")?;
                s.serialize_field("message", abort.message)?;
                s.serialize_field("status_code", &abort.status_code)?;
                s.serialize_field("err_type", abort.err_type)?;
                s.end()
            }
        }
    }
}

/// One `[logprob, token_id, text|null]` triple inside a serde-written list (top and token-id logprobs).
pub(super) struct Triple<'a> {
    pub(super) logprob: Option<f32>,
    pub(super) id: u32,
    pub(super) tok: Option<&'a Tokenizer>,
}

impl Serialize for Triple<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(3))?;
        seq.serialize_element(&self.logprob)?;
        seq.serialize_element(&self.id)?;
        match self.tok {
            Some(tok) => seq.serialize_element(tok.token_text(self.id).as_ref())?,
            None => seq.serialize_element(&())?,
        }
        seq.end()
    }
}

/// `output_token_logprobs`: one triple per output token.
pub(super) struct TokenLogprobs<'a> {
    pub(super) lps: &'a [f32],
    pub(super) ids: &'a [u32],
    pub(super) tok: Option<&'a Tokenizer>,
}

impl TokenLogprobs<'_> {
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        for (i, (&lp, &id)) in self.lps.iter().zip(self.ids).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_triple(out, Some(lp), id, self.tok);
        }
        out.push(b']');
    }
}

/// `input_token_logprobs`: one triple per covered prompt position, the first with a `null` logprob.
pub(super) struct InputTokenLogprobs<'a> {
    pub(super) lps: &'a [Option<f32>],
    pub(super) ids: &'a [u32],
    pub(super) tok: Option<&'a Tokenizer>,
}

impl InputTokenLogprobs<'_> {
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        for (i, (&lp, &id)) in self.lps.iter().zip(self.ids).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_triple(out, lp, id, self.tok);
        }
        out.push(b']');
    }
}

/// The triples of one position; an empty position is `null` (SGLang's `if token_logprobs_val[i]`).
pub(super) struct Position<'a> {
    pub(super) entries: &'a [LogprobEntry],
    pub(super) tok: Option<&'a Tokenizer>,
}

impl Serialize for Position<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.entries.is_empty() {
            return serializer.serialize_unit();
        }
        let mut seq = serializer.serialize_seq(Some(self.entries.len()))?;
        for entry in self.entries {
            seq.serialize_element(&Triple {
                logprob: Some(entry.logprob),
                id: entry.id,
                tok: self.tok,
            })?;
        }
        seq.end()
    }
}

/// Per-output-position lists (`output_top_logprobs`, `output_token_ids_logprobs`).
pub(super) struct OutputPositions<'a> {
    pub(super) entries: &'a [LogprobEntry],
    pub(super) per_position: usize,
    pub(super) tok: Option<&'a Tokenizer>,
}

impl Serialize for OutputPositions<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let per = self.per_position.max(1);
        let mut seq = serializer.serialize_seq(Some(self.entries.len() / per))?;
        for chunk in self.entries.chunks(per) {
            seq.serialize_element(&Position {
                entries: if self.per_position == 0 { &[] } else { chunk },
                tok: self.tok,
            })?;
        }
        seq.end()
    }
}

/// Per-input-position lists: the first covered position has no data and is `null`.
pub(super) struct InputPositions<'a> {
    pub(super) positions: usize,
    pub(super) entries: &'a [LogprobEntry],
    pub(super) per_position: usize,
    pub(super) tok: Option<&'a Tokenizer>,
}

impl Serialize for InputPositions<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.positions))?;
        if self.positions == 0 {
            return seq.end();
        }
        seq.serialize_element(&())?;
        let per = self.per_position.max(1);
        let mut chunks = self.entries.chunks(per);
        for _ in 1..self.positions {
            let entries = if self.per_position == 0 {
                &[][..]
            } else {
                chunks.next().unwrap_or(&[])
            };
            seq.serialize_element(&Position {
                entries,
                tok: self.tok,
            })?;
        }
        seq.end()
    }
}
