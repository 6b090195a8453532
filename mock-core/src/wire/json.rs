//! The JSON pieces of an item object: logprob triples, top-logprob positions, finish reasons, written by hand
//! or through serde in SGLang's key order.

use serde::Serialize;
use serde::ser::{SerializeSeq, SerializeStruct, Serializer};

use crate::engine::{FinishReason, LogprobEntry, Rows};
use crate::model::Tokenizer;

/// The finish reason of an item that the scheduler rejected before running it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abort<'a> {
    pub message: &'a str,
    pub status_code: u16,
    /// `null` for a refusal through `prepare_abort`.
    pub err_type: Option<&'a str>,
}

/// The `message` of a request aborted in the waiting queue (`TokenizerManager._handle_abort_req`).
pub const WAITING_ABORT_MESSAGE: &str = "Abort in waiting queue";
/// The `message` of a request aborted before prefill (0.5.3).
pub const BEFORE_PREFILL_MESSAGE: &str = "Abort before prefill";

/// The finish reason of a request that ended in the waiting queue (`TokenizerManager._handle_abort_req`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitingAbort<'a> {
    /// `/abort_request` or a pause reached it before it ran: `{"type":"abort","message":"Abort in waiting queue"}`.
    Aborted,
    /// The scheduler refused it, e.g. a full queue: `{"type":"abort","status_code":503,"message":...}`.
    Refused { status_code: u16, message: &'a str },
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

/// Writes a long list of short pieces (ids, logprob triples) through a buffer on the stack: each piece is stored
/// by index into the buffer, and the buffer is appended to the output a few hundred bytes at a time, so a piece
/// costs neither a capacity check of the output nor a copy call of its own. Flushed on drop.
pub(super) struct Batched<'a> {
    out: &'a mut Vec<u8>,
    buf: [u8; BATCH],
    len: usize,
}

/// Bytes gathered before each append to the output.
const BATCH: usize = 512;
/// The most bytes one call of [`Batched`] writes: a `u32` has 10 digits, an `f32` in shortest form at most 15
/// bytes (`-1.17549435e-38`), a literal is short by contract.
const PIECE: usize = 32;

/// `"00" "01" ... "99"`: the two digits of each number below 100.
const DIGIT_PAIRS: [u8; 200] = {
    let mut table = [0u8; 200];
    let mut n = 0;
    while n < 100 {
        table[2 * n] = b'0' + (n / 10) as u8;
        table[2 * n + 1] = b'0' + (n % 10) as u8;
        n += 1;
    }
    table
};

impl<'a> Batched<'a> {
    pub(super) fn new(out: &'a mut Vec<u8>) -> Batched<'a> {
        Batched {
            out,
            buf: [0; BATCH],
            len: 0,
        }
    }

    /// Room for a piece of up to [`PIECE`] bytes.
    #[inline(always)]
    fn room(&mut self) -> &mut [u8] {
        if self.len > BATCH - PIECE {
            self.flush();
        }
        &mut self.buf[self.len..self.len + PIECE]
    }

    fn flush(&mut self) {
        self.out.extend_from_slice(&self.buf[..self.len]);
        self.len = 0;
    }

    /// Appends a short literal (at most [`PIECE`] bytes).
    #[inline(always)]
    pub(super) fn literal(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        debug_assert!(n <= PIECE);
        self.room()[..n].copy_from_slice(bytes);
        self.len += n;
    }

    /// Appends a short string of unknown length (at most [`PIECE`] bytes), as two overlapping eight-byte
    /// copies when it has eight bytes or more (a logprob usually has 9 to 12): fixed-size moves instead of a
    /// call to `memcpy`.
    #[inline(always)]
    fn short(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        match (bytes.first_chunk::<8>(), bytes.last_chunk::<8>()) {
            (Some(head), Some(tail)) if n <= 16 => {
                let room = self.room();
                room[..8].copy_from_slice(head);
                room[n - 8..n].copy_from_slice(tail);
                self.len += n;
            }
            _ => self.literal(bytes),
        }
    }

    /// Appends one byte.
    #[inline(always)]
    pub(super) fn byte(&mut self, b: u8) {
        self.room()[0] = b;
        self.len += 1;
    }

    /// Appends `value` in decimal, two digits at a time from the right.
    #[inline(always)]
    pub(super) fn u32(&mut self, value: u32) {
        let len = decimal_len(value);
        let room = self.room();
        let mut v = value;
        let mut i = len;
        while v >= 100 {
            let pair = (v % 100) as usize * 2;
            v /= 100;
            i -= 2;
            room[i] = DIGIT_PAIRS[pair];
            room[i + 1] = DIGIT_PAIRS[pair + 1];
        }
        if v >= 10 {
            let pair = v as usize * 2;
            room[0] = DIGIT_PAIRS[pair];
            room[1] = DIGIT_PAIRS[pair + 1];
        } else {
            room[0] = b'0' + v as u8;
        }
        self.len += len;
    }

    /// Appends a finite `f32` in its shortest form, as serde_json and orjson write it.
    #[inline(always)]
    pub(super) fn f32(&mut self, value: f32) {
        let mut buffer = zmij::Buffer::new();
        self.short(buffer.format_finite(value).as_bytes());
    }
}

/// The number of decimal digits of `v`, by comparisons ordered for token ids (five or six digits).
#[inline(always)]
fn decimal_len(v: u32) -> usize {
    if v < 100_000 {
        if v < 100 {
            1 + usize::from(v >= 10)
        } else {
            3 + usize::from(v >= 1_000) + usize::from(v >= 10_000)
        }
    } else if v < 10_000_000 {
        6 + usize::from(v >= 1_000_000)
    } else {
        8 + usize::from(v >= 100_000_000) + usize::from(v >= 1_000_000_000)
    }
}

impl Drop for Batched<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Writes `text` as a JSON string exactly as serde_json does (`"`, `\\` and the control characters escaped,
/// everything else as is), eight bytes at a time: a word with no byte to escape, the usual case, is tested in a
/// few operations and copied with its run.
pub(super) fn write_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // `bytes[run..at]` needs no escape and is not yet written.
    let mut run = 0;
    let mut at = 0;
    while let Some(word) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        if needs_escape(u64::from_le_bytes(*word)) {
            for (k, &b) in word.iter().enumerate() {
                if let Some(escape) = escape(b) {
                    out.extend_from_slice(&bytes[run..at + k]);
                    write_escape(out, b, escape);
                    run = at + k + 1;
                }
            }
        }
        at += 8;
    }
    for (k, &b) in bytes[at.min(bytes.len())..].iter().enumerate() {
        if let Some(escape) = escape(b) {
            out.extend_from_slice(&bytes[run..at + k]);
            write_escape(out, b, escape);
            run = at + k + 1;
        }
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// Whether any of the eight bytes of `word` is `"`, `\\` or below 0x20: the "has a zero byte" test
/// `(v - 0x01..) & !v & 0x80..` (exact as a yes/no answer) applied to `word ^ '"'`, `word ^ '\\'` and
/// `word & 0xE0..`, which are zero exactly in those bytes. The caller re-checks each byte of a word that
/// answers yes, so this test only decides speed.
#[inline(always)]
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| (v.wrapping_sub(ONES) & !v & HIGHS) != 0;
    has_zero(word ^ (ONES * u64::from(b'"')))
        || has_zero(word ^ (ONES * u64::from(b'\\')))
        || has_zero(word & (ONES * 0xE0))
}

/// serde_json's escape of a byte, if it needs one: a short form, or `u` for `\u00XX`.
#[inline(always)]
fn escape(b: u8) -> Option<u8> {
    match b {
        b'"' => Some(b'"'),
        b'\\' => Some(b'\\'),
        b'\n' => Some(b'n'),
        b'\r' => Some(b'r'),
        b'\t' => Some(b't'),
        0x08 => Some(b'b'),
        0x0C => Some(b'f'),
        0x00..=0x1F => Some(b'u'),
        _ => None,
    }
}

#[cold]
fn write_escape(out: &mut Vec<u8>, b: u8, escape: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'\\');
    out.push(escape);
    if escape == b'u' {
        out.extend_from_slice(&[
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xF)],
        ]);
    }
}

/// Writes `value` as JSON with serde_json (strings with their escapes, floats, nested values).
pub(super) fn write_serde<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Serialising into a Vec cannot fail: every map key is a string and no Serialize impl errors.
    let _ = serde_json::to_writer(SmallWrites(out), value);
}

/// Writes an integer in decimal.
/// Writes a float32 value as the logprobs are written: its shortest form, `null` when not finite.
pub(super) fn write_f32(out: &mut Vec<u8>, value: f32) {
    if value.is_finite() {
        out.extend_from_slice(zmij::Buffer::new().format_finite(value).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

/// Writes a JSON string of the standard base64 (with padding) of `values`' little-endian bytes: how SGLang
/// sends an int32 tensor (`pybase64.b64encode(tensor.numpy().tobytes())`, `routed_experts`).
pub(super) fn write_base64_i32(out: &mut Vec<u8>, values: &[i32]) {
    use base64::Engine;
    let bytes = le_bytes(values);
    out.push(b'"');
    let start = out.len();
    out.resize(
        start + base64::encoded_len(bytes.len(), true).unwrap_or(0),
        0,
    );
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(&bytes, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + written);
    out.push(b'"');
}

/// The standard base64 (with padding) of `values`' little-endian bytes, as a string (the OpenAI answers'
/// `sglext.routed_experts`).
pub fn base64_i32(values: &[i32]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(le_bytes(values))
}

/// The int32 values of a standard base64 string of little-endian bytes (`None` when it is not base64); a trailing
/// partial value is dropped.
pub fn decode_base64_i32(text: &str) -> Option<Vec<i32>> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    Some(
        bytes
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

fn le_bytes(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

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
    /// A length finish whose `max_new_tokens` was a float: `{"type":"length","length":4.0}`.
    FloatLength(u32),
    Abort(Abort<'a>),
    /// `{"type":"abort","message":"Abort in waiting queue"}`, or a refusal with its status first.
    Waiting(WaitingAbort<'a>),
    /// 0.5.3's `{"type":"abort","message":"Abort before prefill"}`.
    BeforePrefill,
}

impl Serialize for FinishJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            FinishJson::FloatLength(length) => {
                let mut s = serializer.serialize_struct("FinishLength", 2)?;
                s.serialize_field("type", "length")?;
                s.serialize_field("length", &f64::from(*length))?;
                s.end()
            }
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
            FinishJson::Waiting(WaitingAbort::Aborted) => {
                let mut s = serializer.serialize_struct("FinishAbort", 2)?;
                s.serialize_field("type", "abort")?;
                s.serialize_field("message", WAITING_ABORT_MESSAGE)?;
                s.end()
            }
            FinishJson::Waiting(WaitingAbort::Refused {
                status_code,
                message,
            }) => {
                let mut s = serializer.serialize_struct("FinishAbort", 3)?;
                s.serialize_field("type", "abort")?;
                s.serialize_field("status_code", status_code)?;
                s.serialize_field("message", message)?;
                s.end()
            }
            FinishJson::BeforePrefill => {
                let mut s = serializer.serialize_struct("FinishAbort", 2)?;
                s.serialize_field("type", "abort")?;
                s.serialize_field("message", BEFORE_PREFILL_MESSAGE)?;
                s.end()
            }
            FinishJson::Abort(abort) => {
                let mut s = serializer.serialize_struct("FinishAbort", 4)?;
                s.serialize_field("type", "abort")?;
                s.serialize_field("message", abort.message)?;
                s.serialize_field("status_code", &abort.status_code)?;
                s.serialize_field("err_type", &abort.err_type)?;
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
        write_triples(out, self.lps.iter().map(|&lp| Some(lp)), self.ids, self.tok);
    }
}

/// A list of `[logprob, token_id, text|null]` triples, `logprobs` and `ids` in step.
fn write_triples(
    out: &mut Vec<u8>,
    logprobs: impl Iterator<Item = Option<f32>>,
    ids: &[u32],
    tok: Option<&Tokenizer>,
) {
    out.push(b'[');
    if tok.is_none() {
        // The common case, a triple per token, written as `write_triple` writes it.
        let mut batched = Batched::new(out);
        for (i, (lp, &id)) in logprobs.zip(ids).enumerate() {
            if i > 0 {
                batched.byte(b',');
            }
            batched.byte(b'[');
            match lp {
                Some(lp) if lp.is_finite() => batched.f32(lp),
                _ => batched.literal(b"null"),
            }
            batched.byte(b',');
            batched.u32(id);
            batched.literal(b",null]");
        }
    } else {
        for (i, (lp, &id)) in logprobs.zip(ids).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_triple(out, lp, id, tok);
        }
    }
    out.push(b']');
}

/// A list of ids, `[1,2,3]`.
pub(super) fn write_ids(out: &mut Vec<u8>, ids: &[u32]) {
    write_ids_after(out, &[], ids);
}

/// `prefix` then `ids`, as one JSON list.
pub(super) fn write_ids_after(out: &mut Vec<u8>, prefix: &[u32], ids: &[u32]) {
    out.push(b'[');
    let mut batched = Batched::new(out);
    for (i, &id) in prefix.iter().chain(ids).enumerate() {
        if i > 0 {
            batched.byte(b',');
        }
        batched.u32(id);
    }
    drop(batched);
    out.push(b']');
}

/// `input_token_logprobs`: one triple per covered prompt position, the first with a `null` logprob.
pub(super) struct InputTokenLogprobs<'a> {
    pub(super) lps: &'a [Option<f32>],
    pub(super) ids: &'a [u32],
    pub(super) tok: Option<&'a Tokenizer>,
}

impl InputTokenLogprobs<'_> {
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        write_triples(out, self.lps.iter().copied(), self.ids, self.tok);
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

/// Per-output-position lists (`output_top_logprobs`, `output_token_ids_logprobs`), from row `from` on.
pub(super) struct OutputPositions<'a> {
    pub(super) rows: &'a Rows,
    pub(super) from: usize,
    pub(super) tok: Option<&'a Tokenizer>,
}

impl Serialize for OutputPositions<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let rows = self.rows.rows_from(self.from);
        let mut seq = serializer.serialize_seq(Some(rows.len()))?;
        for entries in rows {
            seq.serialize_element(&Position {
                entries,
                tok: self.tok,
            })?;
        }
        seq.end()
    }
}

/// Per-input-position lists: the first covered position has no data and is `null`.
pub(super) struct InputPositions<'a> {
    pub(super) positions: usize,
    pub(super) rows: &'a Rows,
    pub(super) tok: Option<&'a Tokenizer>,
}

impl Serialize for InputPositions<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.positions))?;
        if self.positions == 0 {
            return seq.end();
        }
        seq.serialize_element(&())?;
        for p in 1..self.positions {
            seq.serialize_element(&Position {
                entries: self.rows.row(p - 1),
                tok: self.tok,
            })?;
        }
        seq.end()
    }
}
