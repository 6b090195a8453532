//! SGLang's OpenAI-compatible routes, `/v1/completions` and `/v1/chat/completions`, streamed and not, and
//! the tokenizer routes `/tokenize` and `/detokenize` ([`tokenize`]).
//!
//! As in SGLang, each request becomes a native `/generate` request ([`request::translate`]) that runs
//! through the same planner, engine, control plane and abort faults as `/generate` itself
//! (`http::generate::execute`); its answer is then rewritten in OpenAI's shape ([`response`]). Logprobs are
//! therefore those of `/generate` for the same tokens, bit for bit. HTTP faults apply before the request
//! runs, and body and stream faults to the OpenAI answer ([`faults`]).

pub(super) mod faults;
pub(super) mod request;
pub(super) mod response;
pub(super) mod tokenize;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Instant;

use axum::body::{Body, BodyDataStream};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;

use super::conn::ConnHandle;
use super::extract::{Conn, OpenAiJson};
use super::faults::{decide_fault, http_fault};
use super::generate::{UuidRids, execute};
use super::info::unix_seconds;
use super::respond::{json_response, sse_response};
use super::state::AppState;
use crate::error::ApiError;
use crate::faults::stream as stream_faults;
use crate::faults::{BodyFault, Fault};
use crate::request as native;
use crate::wire::{DONE_EVENT, sse_event};
pub(super) use request::{Api, OpenAiRequest};
use response::{ChunkTranslator, Translated};

/// `POST /v1/completions`.
pub(crate) async fn completions(
    State(state): State<AppState>,
    Conn(conn): Conn,
    headers: HeaderMap,
    OpenAiJson(body): OpenAiJson,
) -> Response {
    handle(state, conn, &headers, &body, Api::Completions).await
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(
    State(state): State<AppState>,
    Conn(conn): Conn,
    headers: HeaderMap,
    OpenAiJson(body): OpenAiJson,
) -> Response {
    handle(state, conn, &headers, &body, Api::Chat).await
}

async fn handle(
    state: AppState,
    conn: Option<ConnHandle>,
    headers: &HeaderMap,
    body: &Value,
    api: Api,
) -> Response {
    let started = Instant::now();
    let config = state.config();
    let openai = match request::translate(api, body, config, state.model().tokenizer()) {
        Ok(openai) => openai,
        Err(err) => {
            tracing::info!(error = %err, path = api.path(), "rejected OpenAI request");
            return err.into_response();
        }
    };
    let fault = match decide_fault(&state, api.path(), openai.stream, headers) {
        Ok(fault) => fault,
        Err(err) => return err.into_response(),
    };
    if let Some(fault) = &fault
        && let Some(response) = http_fault(&state, fault, conn.as_ref()).await
    {
        return response;
    }
    // The native body is ours, so it always parses; SGLang's planner then checks the values.
    let native_body = serde_json::to_vec(&openai.native).unwrap_or_default();
    let plan = native::parse_generate(&native_body).and_then(|parsed| {
        native::plan_generate(&parsed, config, state.model().tokenizer(), &mut UuidRids)
    });
    let plan = match plan {
        Ok(plan) => plan,
        Err(err) => return openai_error(err).into_response(),
    };
    // Aborts happen in the engine; every other fault rewrites the OpenAI answer (or leaves it alone).
    let engine_fault = fault.clone().filter(|f| matches!(f, Fault::Engine(_)));
    let answer = execute(&state, plan, engine_fault, started).await;
    // Planning errors were answered above; what fails here (a full queue's 503) passes in SGLang's shape.
    if answer.status() != StatusCode::OK {
        return answer;
    }
    let incremental = config.incremental_streaming_output;
    let created = unix_seconds();
    if openai.stream {
        let translator = ChunkTranslator::new(openai, incremental, created);
        let events = translate_stream(answer.into_body().into_data_stream(), translator);
        let body = match fault.and_then(stream_faults::EventFault::of) {
            Some(fault) => Body::from_stream(stream_faults::apply(events, fault, FORMAT)),
            None => Body::from_stream(events),
        };
        return sse_response(body);
    }
    non_stream_answer(&openai, answer.into_body(), created, fault).await
}

/// OpenAI answers under faults: body faults land on the OpenAI fields ([`faults::mutate`]), and a mid-stream
/// error is the OpenAI layer's `create_streaming_error_response` event.
const FORMAT: stream_faults::Format = stream_faults::Format {
    mutate: mutate_answer,
    error_event: openai_error_event,
};

fn mutate_answer(fault: &BodyFault, json: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Value>(json) {
        Ok(mut value) => {
            faults::mutate(fault, &mut value);
            faults::write(&value)
        }
        // Only the server's own JSON reaches here; anything else passes unchanged.
        Err(_) => json.to_vec(),
    }
}

fn openai_error_event(message: &str) -> Vec<u8> {
    faults::write(&response::stream_error(message, "BadRequestError", 400))
}

/// A native `ValueError` is the OpenAI layer's `BadRequestError`; other errors keep their shape.
fn openai_error(err: ApiError) -> ApiError {
    match err {
        ApiError::Value(message) => ApiError::OpenAiBadRequest(message),
        other => other,
    }
}

async fn non_stream_answer(
    openai: &OpenAiRequest,
    body: Body,
    created: u64,
    fault: Option<Fault>,
) -> Response {
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(err) => {
            return ApiError::internal(format!("native answer unreadable: {err}")).into_response();
        }
    };
    let ret = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Array(items)) => items,
        Ok(item) => vec![item],
        Err(err) => {
            return ApiError::internal(format!("native answer is not JSON: {err}")).into_response();
        }
    };
    let mut out = faults::write(&response::body(openai, &ret, created));
    if let Some(fault) = fault {
        out = match stream_faults::non_stream_body(&fault, out, FORMAT).await {
            Ok(out) => out,
            Err(err) => return err.into_response(),
        };
    }
    json_response(StatusCode::OK, out)
}

/// State of a translated stream: the native events not yet read, and OpenAI events not yet sent.
struct StreamState {
    native: BodyDataStream,
    buf: Vec<u8>,
    translator: ChunkTranslator,
    pending: VecDeque<Bytes>,
    done: bool,
}

impl StreamState {
    fn push(&mut self, chunk: Value) {
        self.pending.push_back(sse_event(&faults::write(&chunk)));
    }

    /// Translate one complete native event.
    fn native_event(&mut self, json: &[u8]) {
        if json == b"[DONE]" {
            for chunk in self.translator.finish() {
                self.push(chunk);
            }
            self.pending.push_back(Bytes::from_static(DONE_EVENT));
            self.done = true;
            return;
        }
        // The native stream is the server's own output; an event that does not parse cannot occur.
        let Ok(event) = serde_json::from_slice::<Value>(json) else {
            return;
        };
        match self.translator.event(&event) {
            Translated::Chunks(chunks) => chunks.into_iter().for_each(|c| self.push(c)),
            Translated::Error(error) => {
                self.pending.push_back(sse_event(&faults::write(&error)));
                self.pending.push_back(Bytes::from_static(DONE_EVENT));
                self.done = true;
            }
        }
    }
}

/// The OpenAI events of a native SSE stream, one event per item.
fn translate_stream(
    native: BodyDataStream,
    translator: ChunkTranslator,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let state = StreamState {
        native,
        buf: Vec::new(),
        translator,
        pending: VecDeque::new(),
        done: false,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(event) = st.pending.pop_front() {
                return Some((Ok(event), st));
            }
            if st.done {
                return None;
            }
            if let Some(end) = st.buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = st.buf.drain(..end + 2).collect();
                if let Some(json) = event.strip_prefix(b"data: ") {
                    st.native_event(&json[..json.len() - 2]);
                }
                continue;
            }
            match st.native.next().await {
                Some(Ok(bytes)) => st.buf.extend_from_slice(&bytes),
                // The native stream ended without `[DONE]` (the server is shutting down): end here too.
                _ => st.done = true,
            }
        }
    })
}
