//! Encoding of `/generate` responses and stream chunks in SGLang's `meta_info` insertion order. Item objects and
//! the logprob triples `[logprob, token_id, text|null]` are written by hand straight from the engine's slices;
//! nested values (finish reasons, top-logprob lists, escaped strings) go through serde_json.

use serde::Serialize;
use serde::ser::{SerializeSeq, SerializeStruct, Serializer};

use crate::config::Profile;
use crate::engine::{FinishReason, Generation, LogprobEntry};
use crate::model::Tokenizer;
use crate::request::PlannedItem;

/// How the output fields of one chunk relate to earlier chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// Everything so far (non-stream bodies and LATEST streams).
    Cumulative,
    /// Only what is new since the previous chunk (`--incremental-streaming-output`).
    Incremental,
    /// MID streams: cumulative `text` and logprobs, delta `output_ids`.
    MidDeltaIds,
}

/// What has already been sent of one item's stream; the offsets of the next delta.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    pub ids: usize,
    pub text_bytes: usize,
}

/// Timing fields that only the final chunk of an item carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finished {
    pub e2e_latency: f64,
    /// Unix time in seconds, [LATEST] only.
    pub response_sent_to_client_ts: f64,
}

/// Everything [`encode_item`] needs besides the generation itself.
#[derive(Debug, Clone, Copy)]
pub struct EncodeCtx<'a> {
    pub profile: Profile,
    pub tokenizer: &'a Tokenizer,
    pub return_text_in_logprobs: bool,
    pub weight_version: &'a str,
}

/// The finish reason of an item that the scheduler rejected before running it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abort<'a> {
    pub message: &'a str,
    pub status_code: u16,
    pub err_type: &'a str,
}

/// Which part of an item one encoded object shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chunk {
    pub mode: OutputMode,
    /// The offsets of the previous chunk, for the delta modes.
    pub sent: Sent,
    /// `Some` for the final object of an item.
    pub finished: Option<Finished>,
    /// The position in a streamed batch.
    pub index: Option<usize>,
    /// How often `/pause_generation` with `mode: "retract"` sent the item back to the queue (\[LATEST\]).
    pub num_retractions: u32,
}

/// Encode one item (a non-stream body, an element of a batch body, or a stream chunk) as JSON bytes.
pub fn encode_item(
    out: &mut Vec<u8>,
    ctx: &EncodeCtx<'_>,
    item: &PlannedItem,
    generation: &Generation,
    chunk: Chunk,
) {
    let Chunk {
        mode,
        sent,
        finished,
        index,
        num_retractions,
    } = chunk;
    let ids = generation.output_ids();
    let full_text = generation.text();
    let (text, ids_from, lp_from) = match mode {
        OutputMode::Cumulative => (full_text, 0, 0),
        OutputMode::Incremental => (
            full_text.get(sent.text_bytes..).unwrap_or(""),
            sent.ids.min(ids.len()),
            sent.ids.min(ids.len()),
        ),
        OutputMode::MidDeltaIds => (full_text, sent.ids.min(ids.len()), 0),
    };
    let req = &item.request;
    let tok = ctx.return_text_in_logprobs.then_some(ctx.tokenizer);
    let latest = ctx.profile == Profile::Latest;
    let logprobs = req.return_logprob.then(|| {
        let lps = generation.output_logprobs();
        let n_out = lps.len();
        let k = item.top_logprobs_num;
        let n_tid = req.token_ids_logprob.len();
        let in_ids = generation.input_logprob_ids();
        LogprobFields {
            input_token_logprobs: InputTokenLogprobs {
                lps: generation.input_logprobs(),
                ids: in_ids,
                tok,
            },
            output_token_logprobs: TokenLogprobs {
                lps: &lps[lp_from.min(n_out)..],
                ids: &ids[lp_from.min(n_out)..n_out.min(ids.len())],
                tok,
            },
            output_token_logprobs_length: latest.then_some(n_out),
            top: (k > 0).then(|| {
                (
                    InputPositions {
                        positions: in_ids.len(),
                        entries: generation.input_top_logprobs(),
                        per_position: k,
                        tok,
                    },
                    OutputPositions {
                        entries: slice_positions(generation.output_top_logprobs(), k, lp_from),
                        per_position: k,
                        tok,
                    },
                )
            }),
            token_ids: item.token_ids_logprob_requested.then(|| {
                (
                    InputPositions {
                        positions: in_ids.len(),
                        entries: generation.input_token_ids_logprobs(),
                        per_position: n_tid,
                        tok,
                    },
                    OutputPositions {
                        entries: slice_positions(
                            generation.output_token_ids_logprobs(),
                            n_tid,
                            lp_from,
                        ),
                        per_position: n_tid,
                        tok,
                    },
                )
            }),
        }
    });
    let finish_reason = generation.finish_reason().map(FinishJson::Engine);
    let body = ItemJson {
        text,
        output_ids: &ids[ids_from..],
        meta_info: MetaInfo {
            id: &item.rid,
            finish_reason,
            prompt_tokens: generation.prompt_tokens(),
            weight_version: ctx.weight_version,
            num_retractions: latest.then_some(num_retractions),
            logprobs,
            reasoning_tokens: latest.then_some(0),
            completion_tokens: ids.len(),
            cached_tokens: 0,
            e2e_latency: finished.map(|f| f.e2e_latency),
            response_sent_to_client_ts: finished
                .filter(|_| latest)
                .map(|f| f.response_sent_to_client_ts),
        },
        index,
    };
    body.write(out);
}

/// The finish reason of an item the scheduler aborted before running it (`logprob_start_len` too large),
/// encoded as SGLang reports it: no output, empty logprob lists.
pub fn encode_aborted(
    out: &mut Vec<u8>,
    ctx: &EncodeCtx<'_>,
    item: &PlannedItem,
    message: &str,
    finished: Finished,
    index: Option<usize>,
) {
    let latest = ctx.profile == Profile::Latest;
    let req = &item.request;
    let logprobs = req.return_logprob.then(|| LogprobFields {
        input_token_logprobs: InputTokenLogprobs {
            lps: &[],
            ids: &[],
            tok: None,
        },
        output_token_logprobs: TokenLogprobs {
            lps: &[],
            ids: &[],
            tok: None,
        },
        output_token_logprobs_length: latest.then_some(0),
        top: (item.top_logprobs_num > 0).then_some({
            (
                InputPositions {
                    positions: 0,
                    entries: &[],
                    per_position: item.top_logprobs_num,
                    tok: None,
                },
                OutputPositions {
                    entries: &[],
                    per_position: item.top_logprobs_num,
                    tok: None,
                },
            )
        }),
        token_ids: item.token_ids_logprob_requested.then_some({
            (
                InputPositions {
                    positions: 0,
                    entries: &[],
                    per_position: 1,
                    tok: None,
                },
                OutputPositions {
                    entries: &[],
                    per_position: 1,
                    tok: None,
                },
            )
        }),
    });
    let body = ItemJson {
        text: "",
        output_ids: &[],
        meta_info: MetaInfo {
            id: &item.rid,
            finish_reason: Some(FinishJson::Abort(Abort {
                message,
                status_code: 400,
                err_type: "BadRequestError",
            })),
            prompt_tokens: req.input_ids.len(),
            weight_version: ctx.weight_version,
            num_retractions: latest.then_some(0),
            logprobs,
            reasoning_tokens: latest.then_some(0),
            completion_tokens: 0,
            cached_tokens: 0,
            e2e_latency: Some(finished.e2e_latency),
            response_sent_to_client_ts: latest.then_some(finished.response_sent_to_client_ts),
        },
        index,
    };
    body.write(out);
}

/// A `Vec<u8>` writer for serde_json, which writes a number or a bracket at a time: short pieces are pushed byte by
/// byte instead of through a `memcpy` call each.
struct SmallWrites<'a>(&'a mut Vec<u8>);

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

/// Whether any logprob this item would report is NaN or infinite (a MID non-stream body then fails with 500).
pub fn has_non_finite_logprob(generation: &Generation, item: &PlannedItem) -> bool {
    if !item.request.return_logprob {
        return false;
    }
    let bad = |x: f32| !x.is_finite();
    generation.output_logprobs().iter().any(|&x| bad(x))
        || generation
            .input_logprobs()
            .iter()
            .flatten()
            .any(|&x| bad(x))
        || (item.top_logprobs_num > 0
            && (generation
                .output_top_logprobs()
                .iter()
                .any(|e| bad(e.logprob))
                || generation
                    .input_top_logprobs()
                    .iter()
                    .any(|e| bad(e.logprob))))
        || (item.token_ids_logprob_requested
            && (generation
                .output_token_ids_logprobs()
                .iter()
                .any(|e| bad(e.logprob))
                || generation
                    .input_token_ids_logprobs()
                    .iter()
                    .any(|e| bad(e.logprob))))
}

fn slice_positions(
    entries: &[LogprobEntry],
    per_position: usize,
    from_position: usize,
) -> &[LogprobEntry] {
    let start = (from_position.saturating_mul(per_position)).min(entries.len());
    &entries[start..]
}

/// One item's object. Written by hand rather than through serde: a 1,024-token answer has some 3,000 numbers,
/// and serde_json's per-element machinery cost as much as generating them.
struct ItemJson<'a> {
    text: &'a str,
    output_ids: &'a [u32],
    meta_info: MetaInfo<'a>,
    index: Option<usize>,
}

impl ItemJson<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(br#"{"text":"#);
        write_serde(out, self.text);
        out.extend_from_slice(br#","output_ids":["#);
        for (i, &id) in self.output_ids.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_int(out, id);
        }
        out.extend_from_slice(br#"],"meta_info":"#);
        self.meta_info.write(out);
        if let Some(index) = self.index {
            out.extend_from_slice(br#","index":"#);
            write_int(out, index);
        }
        out.push(b'}');
    }
}

/// `meta_info` in insertion order: id, finish_reason, prompt_tokens, weight_version, [num_retractions],
/// [logprob keys], [reasoning_tokens], completion_tokens, cached_tokens, [e2e_latency],
/// [response_sent_to_client_ts].
struct MetaInfo<'a> {
    id: &'a str,
    finish_reason: Option<FinishJson<'a>>,
    prompt_tokens: usize,
    weight_version: &'a str,
    num_retractions: Option<u32>,
    logprobs: Option<LogprobFields<'a>>,
    reasoning_tokens: Option<u32>,
    completion_tokens: usize,
    cached_tokens: usize,
    e2e_latency: Option<f64>,
    response_sent_to_client_ts: Option<f64>,
}

struct LogprobFields<'a> {
    input_token_logprobs: InputTokenLogprobs<'a>,
    output_token_logprobs: TokenLogprobs<'a>,
    output_token_logprobs_length: Option<usize>,
    top: Option<(InputPositions<'a>, OutputPositions<'a>)>,
    token_ids: Option<(InputPositions<'a>, OutputPositions<'a>)>,
}

impl MetaInfo<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(br#"{"id":"#);
        write_serde(out, self.id);
        out.extend_from_slice(br#","finish_reason":"#);
        write_serde(out, &self.finish_reason);
        out.extend_from_slice(br#","prompt_tokens":"#);
        write_int(out, self.prompt_tokens);
        out.extend_from_slice(br#","weight_version":"#);
        write_serde(out, self.weight_version);
        if let Some(n) = self.num_retractions {
            out.extend_from_slice(br#","num_retractions":"#);
            write_int(out, n);
        }
        if let Some(lp) = &self.logprobs {
            out.extend_from_slice(br#","input_token_logprobs":"#);
            lp.input_token_logprobs.write(out);
            out.extend_from_slice(br#","output_token_logprobs":"#);
            lp.output_token_logprobs.write(out);
            if let Some(len) = lp.output_token_logprobs_length {
                out.extend_from_slice(br#","output_token_logprobs_length":"#);
                write_int(out, len);
            }
            // Top and token-id lists are rarer and smaller; serde writes them.
            if let Some((input, output)) = &lp.top {
                out.extend_from_slice(br#","input_top_logprobs":"#);
                write_serde(out, input);
                out.extend_from_slice(br#","output_top_logprobs":"#);
                write_serde(out, output);
            }
            if let Some((input, output)) = &lp.token_ids {
                out.extend_from_slice(br#","input_token_ids_logprobs":"#);
                write_serde(out, input);
                out.extend_from_slice(br#","output_token_ids_logprobs":"#);
                write_serde(out, output);
            }
        }
        if let Some(n) = self.reasoning_tokens {
            out.extend_from_slice(br#","reasoning_tokens":"#);
            write_int(out, n);
        }
        out.extend_from_slice(br#","completion_tokens":"#);
        write_int(out, self.completion_tokens);
        out.extend_from_slice(br#","cached_tokens":"#);
        write_int(out, self.cached_tokens);
        if let Some(latency) = self.e2e_latency {
            out.extend_from_slice(br#","e2e_latency":"#);
            write_serde(out, &latency);
        }
        if let Some(ts) = self.response_sent_to_client_ts {
            out.extend_from_slice(br#","response_sent_to_client_ts":"#);
            write_serde(out, &ts);
        }
        out.push(b'}');
    }
}

/// Writes `value` as JSON with serde_json (strings with their escapes, floats, nested values).
fn write_serde<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Serialising into a Vec cannot fail: every map key is a string and no Serialize impl errors.
    let _ = serde_json::to_writer(SmallWrites(out), value);
}

/// Writes an integer in decimal.
fn write_int(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Writes one `[logprob, token_id, text|null]` triple: an `f32` in its shortest form (as serde_json and orjson
/// write floats) and a non-finite or missing one as `null`, as orjson does.
fn write_triple(out: &mut Vec<u8>, logprob: Option<f32>, id: u32, tok: Option<&Tokenizer>) {
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
enum FinishJson<'a> {
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
struct Triple<'a> {
    logprob: Option<f32>,
    id: u32,
    tok: Option<&'a Tokenizer>,
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
struct TokenLogprobs<'a> {
    lps: &'a [f32],
    ids: &'a [u32],
    tok: Option<&'a Tokenizer>,
}

impl TokenLogprobs<'_> {
    fn write(&self, out: &mut Vec<u8>) {
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
struct InputTokenLogprobs<'a> {
    lps: &'a [Option<f32>],
    ids: &'a [u32],
    tok: Option<&'a Tokenizer>,
}

impl InputTokenLogprobs<'_> {
    fn write(&self, out: &mut Vec<u8>) {
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
struct Position<'a> {
    entries: &'a [LogprobEntry],
    tok: Option<&'a Tokenizer>,
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
struct OutputPositions<'a> {
    entries: &'a [LogprobEntry],
    per_position: usize,
    tok: Option<&'a Tokenizer>,
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
struct InputPositions<'a> {
    positions: usize,
    entries: &'a [LogprobEntry],
    per_position: usize,
    tok: Option<&'a Tokenizer>,
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

/// The finish reason of a request that ended in the waiting queue (`TokenizerManager._handle_abort_req`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitingAbort<'a> {
    /// `/abort_request` or a pause reached it before it ran: `{"type":"abort","message":"Abort in waiting queue"}`.
    Aborted,
    /// The scheduler refused it, e.g. a full queue: `{"type":"abort","status_code":503,"message":...}`.
    Refused { status_code: u16, message: &'a str },
}

/// The reduced object SGLang sends for a request aborted in the waiting queue: `meta_info` holds only `id`,
/// `finish_reason`, `weight_version`, `e2e_latency`, the (empty) logprob lists when requested and
/// `completion_tokens`; there is no `prompt_tokens` and no `cached_tokens`.
pub fn encode_waiting_abort(
    out: &mut Vec<u8>,
    ctx: &EncodeCtx<'_>,
    item: &PlannedItem,
    reason: WaitingAbort<'_>,
    e2e_latency: f64,
    index: Option<usize>,
) {
    let string = |out: &mut Vec<u8>, s: &str| {
        let _ = serde_json::to_writer(&mut *out, s);
    };
    out.extend_from_slice(br#"{"text":"","output_ids":[],"meta_info":{"id":"#);
    string(out, &item.rid);
    out.extend_from_slice(br#","finish_reason":{"type":"abort","#);
    match reason {
        WaitingAbort::Aborted => out.extend_from_slice(br#""message":"Abort in waiting queue""#),
        WaitingAbort::Refused {
            status_code,
            message,
        } => {
            out.extend_from_slice(format!(r#""status_code":{status_code},"message":"#).as_bytes());
            string(out, message);
        }
    }
    out.extend_from_slice(br#"},"weight_version":"#);
    string(out, ctx.weight_version);
    out.extend_from_slice(br#","e2e_latency":"#);
    let _ = serde_json::to_writer(&mut *out, &e2e_latency);
    if item.request.return_logprob {
        out.extend_from_slice(br#","input_token_logprobs":[],"output_token_logprobs":[]"#);
        if item.top_logprobs_num > 0 {
            out.extend_from_slice(br#","input_top_logprobs":[],"output_top_logprobs":[]"#);
        }
        if item.token_ids_logprob_requested {
            out.extend_from_slice(
                br#","input_token_ids_logprobs":[],"output_token_ids_logprobs":[]"#,
            );
        }
    }
    out.extend_from_slice(br#","completion_tokens":0}"#);
    if let Some(index) = index {
        out.extend_from_slice(format!(r#","index":{index}"#).as_bytes());
    }
    out.push(b'}');
}

/// \[MID\] "Abort before prefill": `{"text":"","meta_info":{"id","finish_reason","prompt_tokens":0,
/// "completion_tokens":0}}`, with no `output_ids` and no logprob keys at all.
pub fn encode_before_prefill(out: &mut Vec<u8>, item: &PlannedItem, index: Option<usize>) {
    out.extend_from_slice(br#"{"text":"","meta_info":{"id":"#);
    let _ = serde_json::to_writer(&mut *out, &item.rid);
    out.extend_from_slice(
        br#","finish_reason":{"type":"abort","message":"Abort before prefill"},"prompt_tokens":0,"completion_tokens":0}"#,
    );
    if let Some(index) = index {
        out.extend_from_slice(format!(r#","index":{index}"#).as_bytes());
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_written_in_decimal() {
        let mut out = b"[".to_vec();
        for id in [0, 7, 10, 99, 100, 151_935, u32::MAX] {
            write_int(&mut out, id);
            out.push(b',');
        }
        assert_eq!(out, b"[0,7,10,99,100,151935,4294967295,");
    }

    #[test]
    fn triples_match_what_serde_json_writes() {
        for (logprob, id) in [
            (Some(-0.203_125f32), 12_095),
            (Some(-1e-7), 0),
            (None, 42),
            (Some(f32::NEG_INFINITY), 7),
        ] {
            let mut out = Vec::new();
            write_triple(&mut out, logprob, id, None);
            let want = serde_json::to_vec(&(logprob, id, ())).expect("serialisable");
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&want)
            );
        }
    }
}
