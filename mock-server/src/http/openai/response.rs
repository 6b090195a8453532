//! OpenAI answers from the engine's results, as SGLang's OpenAI layer builds them from its native results
//! (`_build_completion_response`, `_build_chat_response`, `_generate_*_stream` and
//! `to_openai_style_logprobs`): whole bodies, and a per-stream [`ChunkTranslator`] that turns each item's
//! due chunk into OpenAI chunks with logprobs sliced to the delta.
//!
//! What SGLang's layer reads of a native item is an [`ItemView`], built here from the typed
//! [`Generation`] (or from an abort that never ran), never from the native JSON. Logprobs are what Python
//! reads from that JSON: the f32's shortest decimal, parsed as a float.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::request::{Api, OpenAiRequest};
use crate::engine::{FinishReason, Generation, LogprobEntry, PlannedItem};
use crate::model::Tokenizer;
use crate::release::OpenAiEncoding;

/// How an item ended, as the OpenAI layer reads `meta_info.finish_reason`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Finish {
    /// Still running (`null`).
    Running,
    Length,
    /// A stop token (`matched` is its id) or a stop string (`matched` is the string).
    Stop(Value),
    /// An abort: with a status (a refusal, an engine error) the stream ends with an error event.
    Abort {
        message: String,
        status: Option<u16>,
    },
}

impl Finish {
    pub(crate) fn of(reason: Option<&FinishReason>) -> Finish {
        match reason {
            None => Finish::Running,
            Some(FinishReason::Length { .. }) => Finish::Length,
            Some(FinishReason::StopToken { matched }) => Finish::Stop(json!(matched)),
            Some(FinishReason::StopStr { matched }) => Finish::Stop(json!(matched)),
            Some(FinishReason::Abort {
                message,
                status_code,
                ..
            }) => Finish::Abort {
                message: message.clone(),
                status: *status_code,
            },
        }
    }

    /// An abort with `message`; with a status the stream ends with an error event.
    pub(crate) fn abort(message: &str, status: Option<u16>) -> Finish {
        Finish::Abort {
            message: message.to_owned(),
            status,
        }
    }

    /// `finish_reason` of a choice.
    fn kind(&self) -> Value {
        match self {
            Finish::Running => Value::Null,
            Finish::Length => json!("length"),
            Finish::Stop(_) => json!("stop"),
            Finish::Abort { .. } => json!("abort"),
        }
    }

    /// `matched_stop` of a choice.
    fn matched(&self) -> Value {
        match self {
            Finish::Stop(matched) => matched.clone(),
            Finish::Running | Finish::Length | Finish::Abort { .. } => Value::Null,
        }
    }
}

/// One `[logprob, id, text]` entry as `(logprob, text)`.
#[derive(Debug, Clone)]
struct Entry {
    logprob: Value,
    text: String,
}

/// One position's top entries in the engine's order (most likely first); `None` for a position without
/// data (the first input position).
type TopRow = Option<Vec<Entry>>;

/// The logprob lists of one native item (from some output position on).
#[derive(Debug, Default)]
pub(crate) struct Logprobs {
    output: Vec<Entry>,
    /// Per output position, the top entries; `None` when the request asked for no top logprobs.
    output_top: Option<Vec<TopRow>>,
    input: Vec<Entry>,
    input_top: Option<Vec<TopRow>>,
}

impl Logprobs {
    fn output_len(&self) -> usize {
        self.output.len()
    }
}

/// What SGLang's OpenAI layer reads of one native item.
#[derive(Debug)]
pub(crate) struct ItemView {
    pub(crate) id: String,
    /// The text the item's object carries (cumulative).
    pub(crate) text: String,
    pub(crate) finish: Finish,
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
    /// `None` for a shape without `weight_version` (0.5.3's abort before prefill).
    pub(crate) weight_version: Option<String>,
    /// `meta_info.weight_versions` of a finished item (0.5.23): the answer's `metadata` repeats it.
    pub(crate) weight_versions: Option<Value>,
    /// `meta_info.routed_experts` of a finished item that asked for them on a server that returns them (base64),
    /// which the answer's `sglext` carries.
    pub(crate) routed_experts: Option<String>,
    pub(crate) logprobs: Logprobs,
}

/// A logprob as Python reads it from SGLang's JSON: the f32's shortest decimal as a float; `null` when not
/// finite (the native encoder writes `null` there).
fn number(logprob: f32) -> Value {
    if !logprob.is_finite() {
        return Value::Null;
    }
    let mut buffer = zmij::Buffer::new();
    serde_json::from_str::<f64>(buffer.format_finite(logprob)).map_or(Value::Null, Value::from)
}

/// The text of a token in a logprob entry: the token's text when the request asked for it.
fn token_text(tok: Option<&Tokenizer>, id: u32) -> String {
    tok.map(|t| t.token_text(id).into_owned())
        .unwrap_or_default()
}

/// One position's top entries as the native item lists them, or `None` for a position without entries.
fn top_row(entries: &[LogprobEntry], tok: Option<&Tokenizer>) -> TopRow {
    (!entries.is_empty()).then(|| {
        entries
            .iter()
            .map(|e| Entry {
                logprob: number(e.logprob),
                text: token_text(tok, e.id),
            })
            .collect()
    })
}

/// A top row as `to_openai_style_logprobs` makes it: a Python dict `{text: logprob}` built in the row's
/// order, so the most likely token comes first and a later equal text replaces the value but keeps the first
/// one's place; `null` for a position without entries.
fn top_dict(row: &TopRow) -> Value {
    match row {
        None => Value::Null,
        Some(entries) => {
            let mut dict = Map::new();
            for entry in entries {
                dict.insert(entry.text.clone(), entry.logprob.clone());
            }
            Value::Object(dict)
        }
    }
}

impl ItemView {
    /// The view of a generated item, its output lists from position `from` on.
    pub(crate) fn generated(
        item: &PlannedItem,
        generation: &Generation,
        tok: Option<&Tokenizer>,
        weight_version: &str,
        from: usize,
    ) -> ItemView {
        let logprobs = if item.request.return_logprob {
            let ids = generation.output_ids();
            let lps = generation.output_logprobs();
            let n = lps.len().min(ids.len());
            let from = from.min(n);
            let k = item.top_logprobs_num;
            let in_ids = generation.input_logprob_ids();
            Logprobs {
                output: lps[from..n]
                    .iter()
                    .zip(&ids[from..n])
                    .map(|(&lp, &id)| Entry {
                        logprob: number(lp),
                        text: token_text(tok, id),
                    })
                    .collect(),
                output_top: (k > 0).then(|| {
                    generation
                        .output_top_logprobs()
                        .rows_from(from)
                        .map(|position| top_row(position, tok))
                        .collect()
                }),
                input: generation
                    .input_logprobs()
                    .iter()
                    .zip(in_ids)
                    .map(|(lp, &id)| Entry {
                        logprob: lp.map_or(Value::Null, number),
                        text: token_text(tok, id),
                    })
                    .collect(),
                input_top: (k > 0).then(|| {
                    let rows = generation.input_top_logprobs();
                    (0..in_ids.len())
                        .map(|p| match p {
                            // The first covered position has no data.
                            0 => None,
                            _ => top_row(rows.row(p - 1), tok),
                        })
                        .collect()
                }),
            }
        } else {
            Logprobs::default()
        };
        ItemView {
            id: item.rid.clone(),
            text: generation.text().to_owned(),
            finish: Finish::of(generation.finish_reason()),
            prompt_tokens: generation.prompt_tokens() as u64,
            completion_tokens: generation.output_ids().len() as u64,
            weight_version: Some(weight_version.to_owned()),
            weight_versions: None,
            // Only a finished item's object has them, as on `/generate`.
            routed_experts: generation
                .finish_reason()
                .and_then(|_| generation.routed_experts())
                .map(|routes| crate::wire::base64_i32(&routes)),
            logprobs,
        }
    }

    /// The view of an item that never produced output: no text, no tokens, empty logprob lists.
    pub(crate) fn empty(
        item: &PlannedItem,
        finish: Finish,
        prompt_tokens: u64,
        weight_version: Option<&str>,
    ) -> ItemView {
        let empty_top = (item.request.return_logprob && item.top_logprobs_num > 0).then(Vec::new);
        ItemView {
            id: item.rid.clone(),
            text: String::new(),
            finish,
            prompt_tokens,
            completion_tokens: 0,
            weight_version: weight_version.map(str::to_owned),
            weight_versions: None,
            routed_experts: None,
            logprobs: Logprobs {
                output_top: empty_top.clone(),
                input_top: empty_top,
                ..Logprobs::default()
            },
        }
    }
}

/// The OpenAI body of a non-stream answer, from the native items (one per choice, in order).
pub(crate) fn body(req: &OpenAiRequest, items: &[ItemView], created: u64) -> Value {
    let choices: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(idx, item)| {
            let finish = &item.finish;
            let lp = &item.logprobs;
            match req.api {
                Api::Completions => {
                    let echo = req.echo.as_ref();
                    let prefix = echo.and_then(|e| e.get(idx / req.n)).map_or("", String::as_str);
                    let logprobs = req.logprobs.map(|_| {
                        let input = echo.map(|_| (&lp.input[..], lp.input_top.as_deref()));
                        completion_logprobs(input, &lp.output, lp.output_top.as_deref())
                    });
                    json!({"index": idx, "text": format!("{prefix}{}", item.text), "logprobs": logprobs,
                           "finish_reason": finish.kind(), "matched_stop": finish.matched()})
                }
                Api::Chat => {
                    let logprobs = req
                        .logprobs
                        .map(|_| chat_logprobs(&lp.output, lp.output_top.as_deref()));
                    json!({"index": idx,
                           "message": {"role": "assistant", "content": item.text, "reasoning_content": null,
                                       "tool_calls": null},
                           "logprobs": logprobs, "finish_reason": finish.kind(),
                           "matched_stop": finish.matched()})
                }
            }
        })
        .collect();
    let first = items.first();
    let mut usage = Usage::default();
    for (idx, item) in items.iter().enumerate() {
        usage.add(idx, item, req.n);
    }
    let mut body = json!({
        "id": first.map_or(Value::Null, |m| json!(m.id)),
        "object": object(req.api, false),
        "created": created,
        "model": req.model,
        "choices": choices,
        "usage": usage.to_json(),
        "metadata": metadata(first),
    });
    // `process_routed_experts_from_ret(ret[0])`: the first item's routes only, and none when they are empty
    // (`if routed_experts or ...`).
    if req.return_routed_experts
        && let Some(routes) = first
            .and_then(|m| m.routed_experts.as_deref())
            .filter(|r| !r.is_empty())
    {
        body["sglext"] = json!({"routed_experts": routes});
    }
    body
}

/// `build_endpoint_weight_version_metadata` (0.5.23's `srt/utils/weight_versions.py`): the first item's
/// `weight_version`, and its `weight_versions` where it has them.
fn metadata(first: Option<&ItemView>) -> Value {
    let mut metadata = json!({"weight_version": first.and_then(|m| m.weight_version.as_deref())});
    if let Some(spans) = first.and_then(|m| m.weight_versions.clone()) {
        metadata["weight_versions"] = spans;
    }
    metadata
}

fn object(api: Api, chunk: bool) -> &'static str {
    match (api, chunk) {
        (Api::Completions, _) => "text_completion",
        (Api::Chat, false) => "chat.completion",
        (Api::Chat, true) => "chat.completion.chunk",
    }
}

/// Token counts summed as `UsageProcessor` does: completion tokens of every choice, prompt tokens once per
/// prompt (every `n`-th choice). The mock keeps no prefix cache (`cached_tokens` is always 0), so
/// `prompt_tokens_details` is `null`, as SGLang reports a zero cached sum.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    prompt: u64,
    completion: u64,
}

impl Usage {
    fn add(&mut self, idx: usize, item: &ItemView, n: usize) {
        self.completion += item.completion_tokens;
        if idx.is_multiple_of(n.max(1)) {
            self.prompt += item.prompt_tokens;
        }
    }

    fn to_json(self) -> Value {
        json!({"prompt_tokens": self.prompt, "completion_tokens": self.completion,
               "total_tokens": self.prompt + self.completion, "prompt_tokens_details": null})
    }
}

/// `to_openai_style_logprobs`: input entries (with echo) then output entries; `text_offset` is always -1.
/// Top lists are listed only where the native answer has them (`logprobs > 0`).
fn completion_logprobs(
    input: Option<(&[Entry], Option<&[TopRow]>)>,
    output: &[Entry],
    output_top: Option<&[TopRow]>,
) -> Value {
    let mut tokens = Vec::new();
    let mut token_logprobs = Vec::new();
    let mut tops = Vec::new();
    let sources = input
        .into_iter()
        .chain(std::iter::once((output, output_top)));
    for (list, top) in sources {
        for entry in list {
            tokens.push(json!(entry.text));
            token_logprobs.push(entry.logprob.clone());
        }
        tops.extend(top.into_iter().flatten().map(top_dict));
    }
    json!({"text_offset": vec![-1; tokens.len()], "token_logprobs": token_logprobs, "tokens": tokens,
           "top_logprobs": tops})
}

/// Chat logprobs: one `{token, bytes, logprob, top_logprobs}` per output token, each with the top list of its
/// own position read through `to_openai_style_logprobs`' dict, as `_process_logprobs_tokens` does (0.5.3,
/// 0.5.9): most likely first, an equal text once.
fn chat_logprobs(output: &[Entry], output_top: Option<&[TopRow]>) -> Value {
    let content: Vec<Value> = output
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let top: Vec<Value> = match output_top.and_then(|t| t.get(i)).map(top_dict) {
                Some(Value::Object(dict)) => dict
                    .iter()
                    .map(|(token, logprob)| {
                        json!({"token": token, "bytes": token.as_bytes(), "logprob": logprob})
                    })
                    .collect(),
                _ => Vec::new(),
            };
            json!({"token": entry.text, "bytes": entry.text.as_bytes(), "logprob": entry.logprob,
                   "top_logprobs": top})
        })
        .collect();
    json!({"content": content})
}

/// What a stream has sent so far for one choice.
#[derive(Debug, Default)]
struct ChoiceState {
    /// Bytes of the text already sent.
    text_sent: usize,
    /// Output logprobs already sent.
    logprobs_sent: usize,
    started: bool,
    finish: Option<Finish>,
    usage: Usage,
    /// `routed_experts[index]`: what the choice's latest native chunk carried (its finishing one has them).
    routed_experts: Option<String>,
}

/// Turns the due chunks of one stream's items into OpenAI chunks, keeping per-choice offsets.
#[derive(Debug)]
pub(crate) struct ChunkTranslator {
    req: OpenAiRequest,
    created: u64,
    id: Value,
    choices: BTreeMap<usize, ChoiceState>,
    /// The choices in the order their first chunk came (the order of Python's per-index dicts).
    seen: Vec<usize>,
}

/// What one item's chunk becomes.
#[derive(Debug, PartialEq)]
pub(crate) enum Translated {
    Chunks(Vec<Value>),
    /// An abort with a status code (a full queue, a refused item): the OpenAI error event ends the stream.
    Error(Value),
}

impl ChunkTranslator {
    pub(crate) fn new(req: OpenAiRequest, created: u64) -> ChunkTranslator {
        ChunkTranslator {
            req,
            created,
            id: Value::Null,
            choices: BTreeMap::new(),
            seen: Vec::new(),
        }
    }

    fn chunk(&self, choices: Vec<Value>, usage: Option<Value>) -> Value {
        let mut chunk = json!({"id": self.id, "object": object(self.req.api, true), "created": self.created,
                               "model": self.req.model, "choices": choices});
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        chunk
    }

    /// A chat chunk of one choice. 0.5.3 dumps a pydantic model, so an unset `usage` is `null`; 0.5.15 and
    /// 0.5.23 encode a msgspec struct with `omit_defaults` (`sse_utils.py: StreamChunk`), so it is left out.
    fn chat_chunk(&self, choice: Value, usage: Option<Value>) -> Value {
        let usage = match self.req.sglang_version.openai_encoding {
            OpenAiEncoding::Pydantic => Some(usage.unwrap_or(Value::Null)),
            OpenAiEncoding::Msgspec => usage,
        };
        self.chunk(vec![choice], usage)
    }

    /// The output position from which choice `index` has logprobs still to send.
    pub(crate) fn logprobs_sent(&self, index: usize) -> usize {
        self.choices.get(&index).map_or(0, |c| c.logprobs_sent)
    }

    /// The chunks of choice `index`'s native chunk `item`, whose logprob lists start at
    /// [`ChunkTranslator::logprobs_sent`].
    pub(crate) fn event(&mut self, index: usize, item: &ItemView) -> Translated {
        if let Finish::Abort {
            message,
            status: Some(code),
        } = &item.finish
        {
            return Translated::Error(abort_error(message, *code));
        }
        if self.id.is_null() {
            self.id = json!(item.id);
        }
        let req = &self.req;
        if !self.choices.contains_key(&index) {
            self.seen.push(index);
        }
        let state = self.choices.entry(index).or_default();
        state.routed_experts = item.routed_experts.clone();
        let mut delta = item
            .text
            .get(state.text_sent..)
            .unwrap_or_default()
            .to_owned();
        state.text_sent = item.text.len();
        let first = !state.started;
        state.started = true;
        state.usage = Usage::default();
        state.usage.add(0, item, 1);
        let logprobs = req
            .logprobs
            .and_then(|_| stream_logprobs(req, &item.logprobs, state, first));
        if item.finish != Finish::Running {
            state.finish = Some(item.finish.clone());
        }
        let usage = req.continuous_usage.then(|| state.usage.to_json());
        let finish = &item.finish;
        let mut chunks = Vec::new();
        match req.api {
            Api::Completions => {
                if first && let Some(echo) = &req.echo {
                    let prefix = echo.get(index / req.n).map_or("", String::as_str);
                    delta = format!("{prefix}{delta}");
                }
                let choice = json!({"index": index, "text": delta, "logprobs": logprobs,
                                    "finish_reason": finish.kind(), "matched_stop": finish.matched()});
                chunks.push(self.chunk(vec![choice], Some(usage.unwrap_or(Value::Null))));
            }
            Api::Chat => {
                let encoding = req.sglang_version.openai_encoding;
                if first {
                    let delta = chat_delta(encoding, Some("assistant"), Some(""));
                    let choice = chat_choice(index, delta, Value::Null, None);
                    chunks.push(self.chat_chunk(choice, None));
                }
                if !delta.is_empty() || logprobs.is_some() {
                    let delta = chat_delta(encoding, None, Some(&delta));
                    let choice = chat_choice(index, delta, logprobs.unwrap_or(Value::Null), None);
                    chunks.push(self.chat_chunk(choice, usage));
                }
            }
        }
        Translated::Chunks(chunks)
    }

    /// The chunks after the last item's: chat's finish chunks, the `sglext` chunk and the usage chunk.
    pub(crate) fn finish(&mut self) -> Vec<Value> {
        let mut chunks = Vec::new();
        if self.req.api == Api::Chat {
            for (index, state) in &self.choices {
                if let Some(finish) = &state.finish {
                    let delta = chat_delta(self.req.sglang_version.openai_encoding, None, None);
                    let choice = chat_choice(*index, delta, Value::Null, Some(finish));
                    chunks.push(self.chat_chunk(choice, None));
                }
            }
        }
        // `next(v for v in routed_experts.values() if v is not None)`: the first choice to appear that has
        // routes, an empty string included; a pydantic chunk, so `usage` is `null`.
        let routes = self
            .seen
            .iter()
            .find_map(|index| self.choices[index].routed_experts.as_ref());
        if self.req.return_routed_experts
            && let Some(routes) = routes
        {
            let mut chunk = self.chunk(Vec::new(), Some(Value::Null));
            chunk["sglext"] = json!({"routed_experts": routes});
            chunks.push(chunk);
        }
        if self.req.include_usage {
            let mut usage = Usage::default();
            for (index, state) in &self.choices {
                usage.completion += state.usage.completion;
                if index.is_multiple_of(self.req.n.max(1)) {
                    usage.prompt += state.usage.prompt;
                }
            }
            chunks.push(self.chunk(Vec::new(), Some(usage.to_json())));
        }
        chunks
    }
}

/// A chat stream delta. 0.5.3's pydantic `DeltaMessage` writes every field (`null` when unset); 0.5.15's and
/// 0.5.23's msgspec `StreamDelta` omits unset ones except `reasoning_content`, which it always writes so that
/// the openai SDK's `delta.reasoning_content` exists (`sse_utils.py: StreamDelta`).
fn chat_delta(encoding: OpenAiEncoding, role: Option<&str>, content: Option<&str>) -> Value {
    match encoding {
        OpenAiEncoding::Pydantic => {
            json!({"role": role, "content": content, "reasoning_content": null, "tool_calls": null})
        }
        OpenAiEncoding::Msgspec => {
            let mut delta = json!({"reasoning_content": null});
            if let Some(role) = role {
                delta["role"] = json!(role);
            }
            if let Some(content) = content {
                delta["content"] = json!(content);
            }
            delta
        }
    }
}

/// A chat stream choice: every release writes all five fields.
fn chat_choice(index: usize, delta: Value, logprobs: Value, finish: Option<&Finish>) -> Value {
    let (kind, matched) = finish.map_or((Value::Null, Value::Null), |f| (f.kind(), f.matched()));
    json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": kind, "matched_stop": matched})
}

/// The logprobs of one chunk: the output entries new since the last chunk (the view's lists start there),
/// and with echo the prompt's entries on the first chunk. `None` when nothing is new.
fn stream_logprobs(
    req: &OpenAiRequest,
    lp: &Logprobs,
    state: &mut ChoiceState,
    first: bool,
) -> Option<Value> {
    let new = lp.output_len();
    state.logprobs_sent += new;
    let echo_input = first && req.echo.is_some();
    if new == 0 && !echo_input {
        return None;
    }
    let output_top = lp
        .output_top
        .as_deref()
        .map(|top| &top[..new.min(top.len())]);
    Some(match req.api {
        Api::Completions => {
            let input = echo_input.then(|| (&lp.input[..], lp.input_top.as_deref()));
            completion_logprobs(input, &lp.output, output_top)
        }
        Api::Chat => chat_logprobs(&lp.output, output_top),
    })
}

/// `create_streaming_error_response`: `{"error": ErrorResponse}`.
pub(crate) fn stream_error(message: &str, kind: &str, code: u64) -> Value {
    json!({"error": {"object": "error", "message": message, "type": kind, "param": null, "code": code}})
}

/// The error event of an abort with a status (a refused item, a full queue, an engine error), as SGLang's
/// OpenAI layer writes it: the status's Python name as the type.
pub(crate) fn abort_error(message: &str, code: u16) -> Value {
    let code = u64::from(code);
    stream_error(message, &status_name(code), code)
}

/// Python's `HTTPStatus(code).name`, from the status's reason phrase: 503 is `SERVICE_UNAVAILABLE`.
fn status_name(code: u64) -> String {
    let reason = u16::try_from(code)
        .ok()
        .and_then(|c| axum::http::StatusCode::from_u16(c).ok())
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Internal Server Error");
    reason.to_ascii_uppercase().replace([' ', '-'], "_")
}

#[cfg(test)]
mod tests {
    use super::status_name;

    #[test]
    fn status_names_are_pythons() {
        for (code, name) in [
            (400, "BAD_REQUEST"),
            (408, "REQUEST_TIMEOUT"),
            (429, "TOO_MANY_REQUESTS"),
            (500, "INTERNAL_SERVER_ERROR"),
            (503, "SERVICE_UNAVAILABLE"),
            (99, "INTERNAL_SERVER_ERROR"),
        ] {
            assert_eq!(status_name(code), name);
        }
    }
}
