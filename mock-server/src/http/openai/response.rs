//! Native `/generate` results turned into OpenAI answers, as SGLang's OpenAI layer does it
//! (`_build_completion_response`, `_build_chat_response`, `_generate_*_stream` and
//! `to_openai_style_logprobs`): whole bodies, and a per-stream [`ChunkTranslator`] that turns each native
//! event into OpenAI chunks with logprobs sliced to the delta.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::request::{Api, OpenAiRequest};

/// The OpenAI body of a non-stream answer, from the native result objects (one per choice, in order).
pub(crate) fn body(req: &OpenAiRequest, ret: &[Value], created: u64) -> Value {
    let choices: Vec<Value> = ret
        .iter()
        .enumerate()
        .map(|(idx, item)| {
            let meta = &item["meta_info"];
            let finish = &meta["finish_reason"];
            let text = item["text"].as_str().unwrap_or_default();
            match req.api {
                Api::Completions => {
                    let echo = req.echo.as_ref();
                    let prefix = echo.and_then(|e| e.get(idx / req.n)).map_or("", String::as_str);
                    let logprobs = req.logprobs.map(|_| {
                        let input = echo.map(|_| (&meta["input_token_logprobs"], &meta["input_top_logprobs"]));
                        completion_logprobs(input, &meta["output_token_logprobs"], &meta["output_top_logprobs"])
                    });
                    json!({"index": idx, "text": format!("{prefix}{text}"), "logprobs": logprobs,
                           "finish_reason": finish_type(finish), "matched_stop": matched(finish)})
                }
                Api::Chat => {
                    let logprobs = req.logprobs.map(|_| {
                        chat_logprobs(&meta["output_token_logprobs"], &meta["output_top_logprobs"])
                    });
                    json!({"index": idx,
                           "message": {"role": "assistant", "content": text, "reasoning_content": null,
                                       "tool_calls": null},
                           "logprobs": logprobs, "finish_reason": finish_type(finish),
                           "matched_stop": matched(finish)})
                }
            }
        })
        .collect();
    let first = ret.first().map(|r| &r["meta_info"]);
    let mut usage = Usage::default();
    for (idx, item) in ret.iter().enumerate() {
        usage.add(idx, &item["meta_info"], req.n);
    }
    json!({
        "id": first.map_or(Value::Null, |m| m["id"].clone()),
        "object": object(req.api, false),
        "created": created,
        "model": req.model,
        "choices": choices,
        "usage": usage.to_json(),
        "metadata": {"weight_version": first.map_or(Value::Null, |m| m["weight_version"].clone())},
    })
}

fn object(api: Api, chunk: bool) -> &'static str {
    match (api, chunk) {
        (Api::Completions, _) => "text_completion",
        (Api::Chat, false) => "chat.completion",
        (Api::Chat, true) => "chat.completion.chunk",
    }
}

fn finish_type(finish: &Value) -> Value {
    finish.get("type").cloned().unwrap_or(Value::Null)
}

fn matched(finish: &Value) -> Value {
    finish.get("matched").cloned().unwrap_or(Value::Null)
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
    fn add(&mut self, idx: usize, meta: &Value, n: usize) {
        self.completion += meta["completion_tokens"].as_u64().unwrap_or(0);
        if idx.is_multiple_of(n.max(1)) {
            self.prompt += meta["prompt_tokens"].as_u64().unwrap_or(0);
        }
    }

    fn to_json(self) -> Value {
        json!({"prompt_tokens": self.prompt, "completion_tokens": self.completion,
               "total_tokens": self.prompt + self.completion, "prompt_tokens_details": null})
    }
}

/// Native `[logprob, id, text]` entries as `(logprob, text)`.
fn entries(list: &Value) -> impl Iterator<Item = (&Value, &str)> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|e| (&e[0], e[2].as_str().unwrap_or_default()))
}

/// One position's top list as `{text: logprob}` (a later equal text wins, as in a Python dict), or `null`.
fn top_dict(top: &Value) -> Value {
    match top.as_array() {
        Some(list) => Value::Object(
            list.iter()
                .map(|e| (e[2].as_str().unwrap_or_default().to_owned(), e[0].clone()))
                .collect::<Map<_, _>>(),
        ),
        None => Value::Null,
    }
}

/// `to_openai_style_logprobs`: input entries (with echo) then output entries; `text_offset` is always -1.
/// Top lists are listed only where the native answer has them (`logprobs > 0`).
fn completion_logprobs(
    input: Option<(&Value, &Value)>,
    output: &Value,
    output_top: &Value,
) -> Value {
    let mut tokens = Vec::new();
    let mut token_logprobs = Vec::new();
    let mut tops = Vec::new();
    let sources = input
        .into_iter()
        .chain(std::iter::once((output, output_top)));
    for (list, top) in sources {
        for (logprob, text) in entries(list) {
            tokens.push(json!(text));
            token_logprobs.push(logprob.clone());
        }
        tops.extend(top.as_array().into_iter().flatten().map(top_dict));
    }
    json!({"text_offset": vec![-1; tokens.len()], "token_logprobs": token_logprobs, "tokens": tokens,
           "top_logprobs": tops})
}

/// Chat logprobs: one `{token, bytes, logprob, top_logprobs}` per output token, each with the top list of its
/// own position.
fn chat_logprobs(output: &Value, output_top: &Value) -> Value {
    let tops = output_top.as_array();
    let content: Vec<Value> = entries(output)
        .enumerate()
        .map(|(i, (logprob, text))| {
            let top: Vec<Value> = tops
                .and_then(|t| t.get(i))
                .map(top_dict)
                .and_then(|d| d.as_object().cloned())
                .into_iter()
                .flatten()
                .map(|(token, logprob)| json!({"token": token, "bytes": token.as_bytes(), "logprob": logprob}))
                .collect();
            json!({"token": text, "bytes": text.as_bytes(), "logprob": logprob, "top_logprobs": top})
        })
        .collect();
    json!({"content": content})
}

/// What a stream has sent so far for one choice.
#[derive(Debug, Default)]
struct ChoiceState {
    /// Bytes of the cumulative text already sent (cumulative native streams only).
    text_sent: usize,
    /// Output logprobs already sent (cumulative native streams only).
    logprobs_sent: usize,
    started: bool,
    finish: Option<Value>,
    usage: Usage,
}

/// Turns the native events of one stream into OpenAI chunks, keeping per-choice offsets.
#[derive(Debug)]
pub(crate) struct ChunkTranslator {
    req: OpenAiRequest,
    /// Native `text` and logprobs arrive as deltas (`--incremental-streaming-output`).
    incremental: bool,
    created: u64,
    id: Value,
    choices: BTreeMap<usize, ChoiceState>,
}

/// What one native event becomes.
#[derive(Debug, PartialEq)]
pub(crate) enum Translated {
    Chunks(Vec<Value>),
    /// An abort with a status code (a full queue): the OpenAI error event ends the stream.
    Error(Value),
}

impl ChunkTranslator {
    pub(crate) fn new(req: OpenAiRequest, incremental: bool, created: u64) -> ChunkTranslator {
        ChunkTranslator {
            req,
            incremental,
            created,
            id: Value::Null,
            choices: BTreeMap::new(),
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

    /// The chunks of one native event.
    pub(crate) fn event(&mut self, event: &Value) -> Translated {
        let meta = &event["meta_info"];
        let finish = &meta["finish_reason"];
        if finish["type"] == "abort"
            && let Some(code) = finish["status_code"].as_u64()
        {
            let message = finish["message"].as_str().unwrap_or("Generation aborted.");
            return Translated::Error(stream_error(message, &status_name(code), code));
        }
        if self.id.is_null() {
            self.id = meta["id"].clone();
        }
        let index = event["index"].as_u64().unwrap_or(0) as usize;
        let incremental = self.incremental;
        let req = &self.req;
        let state = self.choices.entry(index).or_default();
        let text = event["text"].as_str().unwrap_or_default();
        let mut delta = if incremental {
            text.to_owned()
        } else {
            let new = text.get(state.text_sent..).unwrap_or_default().to_owned();
            state.text_sent = text.len();
            new
        };
        let first = !state.started;
        state.started = true;
        state.usage = Usage::default();
        state.usage.add(0, meta, 1);
        let logprobs = req
            .logprobs
            .and_then(|_| stream_logprobs(req, meta, state, first, incremental));
        if !finish.is_null() {
            state.finish = Some(finish.clone());
        }
        let usage = req.continuous_usage.then(|| state.usage.to_json());
        let mut chunks = Vec::new();
        match req.api {
            Api::Completions => {
                if first && let Some(echo) = &req.echo {
                    let prefix = echo.get(index / req.n).map_or("", String::as_str);
                    delta = format!("{prefix}{delta}");
                }
                let choice = json!({"index": index, "text": delta, "logprobs": logprobs,
                                    "finish_reason": finish_type(finish), "matched_stop": matched(finish)});
                chunks.push(self.chunk(vec![choice], Some(usage.unwrap_or(Value::Null))));
            }
            Api::Chat => {
                if first {
                    let choice = json!({"index": index, "delta": {"role": "assistant", "content": ""},
                                        "logprobs": null, "finish_reason": null});
                    chunks.push(self.chunk(vec![choice], None));
                }
                if !delta.is_empty() || logprobs.is_some() {
                    let choice = json!({"index": index, "delta": {"content": delta}, "logprobs": logprobs,
                                        "finish_reason": null});
                    chunks.push(self.chunk(vec![choice], usage));
                }
            }
        }
        Translated::Chunks(chunks)
    }

    /// The chunks after the last native event: chat's finish chunks, and the usage chunk.
    pub(crate) fn finish(&mut self) -> Vec<Value> {
        let mut chunks = Vec::new();
        if self.req.api == Api::Chat {
            for (index, state) in &self.choices {
                if let Some(finish) = &state.finish {
                    let choice = json!({"index": index, "delta": {}, "logprobs": null,
                                        "finish_reason": finish_type(finish), "matched_stop": matched(finish)});
                    chunks.push(self.chunk(vec![choice], None));
                }
            }
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

/// The logprobs of one chunk: new output entries since the last chunk, and with echo the prompt's entries
/// on the first chunk. `None` when nothing is new.
fn stream_logprobs(
    req: &OpenAiRequest,
    meta: &Value,
    state: &mut ChoiceState,
    first: bool,
    incremental: bool,
) -> Option<Value> {
    let output = &meta["output_token_logprobs"];
    let top = &meta["output_top_logprobs"];
    // Cumulative native streams repeat what was sent; incremental ones carry only the new entries.
    let total = output.as_array().map_or(0, Vec::len);
    let prev = if incremental {
        0
    } else {
        state.logprobs_sent.min(total)
    };
    state.logprobs_sent = total;
    let echo_input = first && req.echo.is_some();
    if prev >= total && !echo_input {
        return None;
    }
    let slice = |v: &Value| match v.as_array() {
        Some(list) => Value::Array(list[prev.min(list.len())..total.min(list.len())].to_vec()),
        None => Value::Null,
    };
    Some(match req.api {
        Api::Completions => {
            let input =
                echo_input.then(|| (&meta["input_token_logprobs"], &meta["input_top_logprobs"]));
            completion_logprobs(input, &slice(output), &slice(top))
        }
        Api::Chat => chat_logprobs(&slice(output), &slice(top)),
    })
}

/// `create_streaming_error_response`: `{"error": ErrorResponse}`.
pub(crate) fn stream_error(message: &str, kind: &str, code: u64) -> Value {
    json!({"error": {"object": "error", "message": message, "type": kind, "param": null, "code": code}})
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
