//! Streamed `/generate` responses (spec section 3): SSE framing and reassembly into the same turns as a non-stream call.
//!
//! SGLang streams have changed shape across versions, per field:
//!
//! | mode | `text` | `output_ids` | `output_token_logprobs` |
//! |---|---|---|---|
//! | [`StreamMode::Cumulative`] (0.5.15 and later, the default) | cumulative | cumulative | cumulative |
//! | [`StreamMode::Incremental`] (`--incremental-streaming-output`) | delta | delta | delta |
//! | [`StreamMode::Mid`] (0.5.3) | cumulative | delta | cumulative |
//!
//! [`StreamMode::Auto`] (the default) decides per item at the first chunk where the modes
//! disagree, which is the first chunk after some tokens arrived: there `output_ids` has
//! `completion_tokens` entries when cumulative and `completion_tokens - previous` when a delta,
//! and `output_token_logprobs` tells Mid from Incremental the same way. Before that chunk every
//! mode gives the same result. If `completion_tokens` is absent the chunk is ambiguous and Auto
//! reports an error instead of guessing; without logprobs, Mid and Incremental differ only in
//! `text`, so Auto then takes the text as cumulative when it extends the previous text. Set the
//! mode explicitly when you know the server.

use crate::channels::Asked;
use crate::decode;
use crate::error::ResponseError;
use crate::turn::Turn;
use crate::validate;
use crate::wire::{GenerateResponse, MetaInfo, SamplingLogprobs, TokenLogprobs};

// The mode is a property of the wire format, so it is defined with the wire types; it stays reachable
// here, where it was first defined and where its modes are explained.
pub use crate::wire::StreamMode;

/// Incremental SSE parser: bytes in, complete `data:` payloads out, however the bytes were split.
///
/// SGLang writes exactly `data: <json>\n\n`; this also accepts `\r\n`, `data:` without the
/// space, multi-line data, comments (`:keep-alive`, which axum-based routers send) and ignores
/// `event:`/`id:`/`retry:` fields, as the SSE standard says.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a newline (so a long line split over many network
    /// chunks is scanned once, not once per chunk).
    scanned: usize,
    data: Vec<u8>,
    has_data: bool,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feeds bytes; calls `on_data` with each complete event's data, in order.
    pub fn push<E>(
        &mut self,
        bytes: &[u8],
        mut on_data: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(pos) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
            let end = self.scanned + pos;
            let mut line = &self.buf[start..end];
            if let [rest @ .., b'\r'] = line {
                line = rest;
            }
            if line.is_empty() {
                if self.has_data {
                    self.has_data = false;
                    let r = on_data(&self.data);
                    self.data.clear();
                    r?;
                }
            } else if line[0] != b':' {
                let (field, value) = match line.iter().position(|&b| b == b':') {
                    Some(i) => {
                        let v = &line[i + 1..];
                        (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
                    }
                    None => (line, &[][..]),
                };
                if field == b"data" {
                    if self.has_data {
                        self.data.push(b'\n');
                    }
                    self.data.extend_from_slice(value);
                    self.has_data = true;
                }
            }
            start = end + 1;
            self.scanned = start;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        Ok(())
    }

    /// True if bytes of an unfinished event are buffered.
    pub fn has_partial(&self) -> bool {
        self.has_data || !self.buf.is_empty()
    }
}

#[derive(Debug, Default)]
struct Item {
    mode: Option<StreamMode>,
    text: String,
    ids: Vec<u32>,
    saw_ids: bool,
    lps: Option<TokenLogprobs>,
    /// The sampling masks so far, gathered like the logprobs (deltas in an incremental stream).
    masks: Option<Vec<Vec<u32>>>,
    mask_lps: Option<SamplingLogprobs>,
    meta: Option<MetaInfo>,
    finished: bool,
}

/// What one chunk carries for its item.
struct Delta {
    text: Option<String>,
    ids: Option<Vec<u32>>,
    lps: Option<TokenLogprobs>,
    completion_tokens: Option<usize>,
    masks: Option<Vec<Vec<u32>>>,
    mask_lps: Option<SamplingLogprobs>,
}

impl Item {
    /// Folds one chunk into the item according to the (possibly just detected) mode.
    fn apply(
        &mut self,
        configured: StreamMode,
        (index, chunk): (usize, usize),
        d: Delta,
    ) -> Result<(), ResponseError> {
        let prev = self.ids.len();
        // Tokens that arrived before this chunk: the ids, or, from a server that sends no
        // `output_ids`, the logprobs.
        let arrived = if self.saw_ids {
            prev
        } else {
            self.lps.as_ref().map_or(0, TokenLogprobs::len)
        };
        let mismatch = |mode: StreamMode, detail: String| ResponseError::StreamModeMismatch {
            index,
            chunk,
            mode,
            detail,
        };
        if self.mode.is_none() && arrived > 0 {
            self.mode = Some(match configured {
                StreamMode::Auto => detect(
                    arrived,
                    &self.text,
                    d.completion_tokens,
                    d.ids.as_ref().map(Vec::len),
                    d.lps.as_ref().map(TokenLogprobs::len),
                    d.text.as_deref(),
                )
                .map_err(|detail| mismatch(StreamMode::Auto, detail))?,
                m @ (StreamMode::Cumulative | StreamMode::Incremental | StreamMode::Mid) => m,
            });
        }
        let Some(mode) = self.mode else {
            // Nothing accumulated yet: every mode means "take the chunk as it is".
            if let Some(t) = d.text {
                self.text = t;
            }
            if let Some(ids) = d.ids {
                self.ids = ids;
                self.saw_ids = true;
            }
            if d.lps.is_some() {
                self.lps = d.lps;
            }
            if d.masks.is_some() {
                self.masks = d.masks;
            }
            if d.mask_lps.is_some() {
                self.mask_lps = d.mask_lps;
            }
            return Ok(());
        };
        let ids_delta = matches!(mode, StreamMode::Incremental | StreamMode::Mid);
        if let Some(ids) = d.ids {
            if let Some(c) = d.completion_tokens {
                let want = if ids_delta {
                    c.checked_sub(prev)
                } else {
                    Some(c)
                };
                if want != Some(ids.len()) {
                    return Err(mismatch(
                        mode,
                        format!(
                            "output_ids has {} entries, completion_tokens is {c} and {prev} \
                             tokens arrived before",
                            ids.len()
                        ),
                    ));
                }
            }
            if ids_delta {
                self.ids.extend_from_slice(&ids);
            } else {
                if ids.len() < prev || ids[..prev] != self.ids[..] {
                    return Err(mismatch(
                        mode,
                        "cumulative output_ids do not extend the previous chunk".into(),
                    ));
                }
                self.ids = ids;
            }
            self.saw_ids = true;
        }
        if let Some(t) = d.text {
            if mode == StreamMode::Incremental {
                self.text.push_str(&t);
            } else {
                self.text = t;
            }
        }
        if let Some(l) = d.lps {
            match (&mut self.lps, mode) {
                (Some(acc), StreamMode::Incremental) => acc.extend_from(&l),
                (acc, _) => *acc = Some(l),
            }
        }
        if let Some(m) = d.masks {
            match (&mut self.masks, mode) {
                (Some(acc), StreamMode::Incremental) => acc.extend(m),
                (acc, _) => *acc = Some(m),
            }
        }
        if let Some(l) = d.mask_lps {
            match (&mut self.mask_lps, mode) {
                (Some(acc), StreamMode::Incremental) => acc.extend_from(l),
                (acc, _) => *acc = Some(l),
            }
        }
        Ok(())
    }
}

/// Reassembles decoded chunks into per-item results.
#[derive(Debug)]
pub struct StreamAssembler {
    mode: StreamMode,
    asked: Asked,
    items: Vec<Item>,
    chunks: usize,
    done: bool,
}

impl StreamAssembler {
    /// An assembler for a stream of a request that asked for `asked` (`return_logprob` alone converts from a
    /// `bool`).
    pub fn new(mode: StreamMode, asked: impl Into<Asked>) -> StreamAssembler {
        StreamAssembler {
            mode,
            asked: asked.into(),
            items: Vec::new(),
            chunks: 0,
            done: false,
        }
    }

    /// Chunks received so far (not counting `[DONE]`).
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Handles one SSE data payload: a chunk, an error event or `[DONE]`.
    pub fn push_data(&mut self, data: &[u8]) -> Result<(), ResponseError> {
        if data.trim_ascii() == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        if self.done {
            return Err(ResponseError::DataAfterDone);
        }
        let chunk = self.chunks;
        self.chunks += 1;
        let resp = decode::decode_response(data).map_err(|e| ResponseError::Chunk {
            chunk,
            source: Box::new(e),
        })?;
        if let Some(err) = resp.error {
            return Err(ResponseError::ServerError {
                message: err.message.unwrap_or_default(),
            });
        }
        self.push_chunk(chunk, resp)
    }

    fn push_chunk(&mut self, chunk: usize, resp: GenerateResponse) -> Result<(), ResponseError> {
        let index = resp.index.unwrap_or(0);
        if self.items.len() <= index {
            self.items.resize_with(index + 1, Item::default);
        }
        let item = &mut self.items[index];
        if item.finished {
            return Err(ResponseError::ChunkAfterFinish { index, chunk });
        }
        let mut meta = resp.meta_info.ok_or_else(|| ResponseError::Chunk {
            chunk,
            source: Box::new(ResponseError::MissingMetaInfo),
        })?;
        let mut ids = resp.output_ids;
        // Only an item's first ids can hold 0.5.3's detokenizer window (`validate::decode_window`).
        if !item.saw_ids
            && let Some(ids) = &mut ids
        {
            let output = meta
                .output_token_logprobs
                .as_ref()
                .map(TokenLogprobs::len)
                .or(meta.completion_tokens);
            if let Some(output) = output {
                ids.drain(..validate::decode_window(ids.len(), output, meta.prompt_tokens));
            }
        }
        let delta = Delta {
            text: resp.text,
            ids,
            lps: meta.output_token_logprobs.take(),
            completion_tokens: meta.completion_tokens,
            masks: meta.output_token_sampling_mask.take(),
            mask_lps: meta.output_token_sampling_logprobs.take(),
        };
        let at = (index, chunk);
        if meta.finish_reason.as_ref().is_some_and(|f| f.is_abort()) {
            // SGLang's waiting-queue abort path may put `[last_id]` or `[]` in `output_ids` of the
            // final chunk whatever the streaming mode. An abort chunk that does not fit is dropped,
            // and the item keeps what it had: a consistent partial turn, never a shifted one.
            let backup = (
                item.mode,
                item.text.clone(),
                item.ids.clone(),
                item.saw_ids,
                item.lps.clone(),
                (item.masks.clone(), item.mask_lps.clone()),
            );
            let fits = item.apply(self.mode, at, delta).is_ok()
                && (!self.asked.logprobs
                    || item.lps.as_ref().map(TokenLogprobs::len) == Some(item.ids.len()));
            if !fits {
                let masks;
                (
                    item.mode,
                    item.text,
                    item.ids,
                    item.saw_ids,
                    item.lps,
                    masks,
                ) = backup;
                (item.masks, item.mask_lps) = masks;
            }
        } else {
            item.apply(self.mode, at, delta)?;
        }
        item.finished = meta.finish_reason.is_some();
        item.meta = Some(meta);
        Ok(())
    }

    /// Turns the finished stream into one turn per item, validated exactly like a non-stream
    /// response. `expected_items` is `batch_size * n` when known.
    pub fn finish(self, expected_items: Option<usize>) -> Result<Vec<Turn>, ResponseError> {
        if !self.done {
            return Err(ResponseError::StreamEndedWithoutDone {
                chunks: self.chunks,
            });
        }
        if let Some(expected) = expected_items
            && expected != self.items.len()
        {
            if self.items.len() < expected {
                return Err(ResponseError::StreamIncomplete {
                    index: self.items.len(),
                });
            }
            return Err(ResponseError::ItemCount {
                expected,
                got: self.items.len(),
            });
        }
        let asked = self.asked;
        self.items
            .into_iter()
            .enumerate()
            .map(|(index, item)| {
                if !item.finished {
                    return Err(ResponseError::StreamIncomplete { index });
                }
                let mut meta = item.meta;
                if let Some(m) = meta.as_mut() {
                    m.output_token_logprobs = item.lps;
                    m.output_token_sampling_mask = item.masks;
                    m.output_token_sampling_logprobs = item.mask_lps;
                }
                let resp = GenerateResponse {
                    text: Some(item.text),
                    output_ids: item.saw_ids.then_some(item.ids),
                    meta_info: meta,
                    index: None,
                    prompt_token_ids: None,
                    error: None,
                };
                Turn::from_response(resp, asked).map_err(|e| e.in_item(index))
            })
            .collect()
    }
}

/// Auto-detection at the first chunk after `prev > 0` tokens arrived; `Err` explains why the
/// chunk fits no mode or is ambiguous.
fn detect(
    prev: usize,
    prev_text: &str,
    completion_tokens: Option<usize>,
    ids_len: Option<usize>,
    lps_len: Option<usize>,
    text: Option<&str>,
) -> Result<StreamMode, String> {
    let Some(c) = completion_tokens else {
        return Err(
            "cannot tell the streaming mode without meta_info.completion_tokens; \
                    set StreamMode explicitly"
                .into(),
        );
    };
    let fits = |len: usize| (len == c, Some(len) == c.checked_sub(prev));
    let ids_delta = match ids_len.map(fits) {
        Some((true, false)) => false,
        Some((false, true)) => true,
        Some(_) => {
            return Err(format!(
                "output_ids has {} entries, which is neither completion_tokens ({c}) nor the \
                 {} new tokens",
                ids_len.unwrap_or(0),
                c.saturating_sub(prev)
            ));
        }
        None => match lps_len.map(fits) {
            // No ids in this chunk: the logprobs alone decide cumulative vs incremental.
            Some((true, false)) => return Ok(StreamMode::Cumulative),
            Some((false, true)) => return Ok(StreamMode::Incremental),
            _ => return Err("chunk has neither output_ids nor logprobs to detect the mode".into()),
        },
    };
    if !ids_delta {
        return Ok(StreamMode::Cumulative);
    }
    match lps_len.map(fits) {
        Some((true, false)) => Ok(StreamMode::Mid),
        Some((false, true)) => Ok(StreamMode::Incremental),
        Some(_) => Err(format!(
            "output_token_logprobs has {} entries, which is neither completion_tokens ({c}) nor \
             the {} new tokens",
            lps_len.unwrap_or(0),
            c.saturating_sub(prev)
        )),
        None => Ok(match text {
            Some(t) if !prev_text.is_empty() && t.starts_with(prev_text) => StreamMode::Mid,
            _ => StreamMode::Incremental,
        }),
    }
}

/// SSE parser plus assembler: feed raw body bytes as they arrive, then [`StreamDecoder::finish`].
#[derive(Debug)]
pub struct StreamDecoder {
    parser: SseParser,
    assembler: StreamAssembler,
}

impl StreamDecoder {
    pub fn new(mode: StreamMode, asked: impl Into<Asked>) -> StreamDecoder {
        StreamDecoder {
            parser: SseParser::new(),
            assembler: StreamAssembler::new(mode, asked),
        }
    }

    pub fn push(&mut self, bytes: &[u8]) -> Result<(), ResponseError> {
        let asm = &mut self.assembler;
        self.parser.push(bytes, |data| asm.push_data(data))
    }

    /// Chunks decoded so far.
    pub fn chunks(&self) -> usize {
        self.assembler.chunks()
    }

    pub fn is_done(&self) -> bool {
        self.assembler.is_done()
    }

    pub fn finish(self, expected_items: Option<usize>) -> Result<Vec<Turn>, ResponseError> {
        self.assembler.finish(expected_items)
    }
}

/// Decodes a whole streamed body given as network chunks (handy for tests and recorded streams).
pub fn decode_stream<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
    mode: StreamMode,
    asked: impl Into<Asked>,
    expected_items: Option<usize>,
) -> Result<Vec<Turn>, ResponseError> {
    let mut d = StreamDecoder::new(mode, asked);
    for c in chunks {
        d.push(c)?;
    }
    d.finish(expected_items)
}
