//! SGLang's OpenAI-compatible routes, `/v1/completions` and `/v1/chat/completions`, streamed and not, and
//! the tokenizer routes `/tokenize` and `/detokenize` ([`tokenize`]).
//!
//! As in SGLang, each request becomes a native `/generate` request ([`request::translate`]) that runs
//! through the same planner, engine, control plane and abort faults as `/generate` itself
//! (`http::generate::execute`). What that hands back is typed (the finished run, the items that never ran,
//! or a stream driven tick by tick), and this module writes it in OpenAI's shape from the engine's own
//! values ([`response`]), never by reading native JSON back. Logprobs are therefore those of `/generate` for
//! the same tokens, bit for bit. HTTP faults apply before the request runs, and body and stream faults to
//! the OpenAI answer ([`faults`]).

pub(super) mod faults;
mod json;
pub(super) mod request;
pub(super) mod response;
pub(super) mod tokenize;

use std::collections::VecDeque;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use super::conn::ConnHandle;
use super::drive::{self, Events};
use super::extract::{Conn, OpenAiJson, error_response};
use super::faults::{decide_fault, http_fault};
use super::generate::{Answered, Outcome, UuidRids, execute};
use super::info::unix_seconds;
use super::respond::{json_response, sse_response};
use super::state::AppState;
use super::witness::Witness;
use crate::error::ApiError;
use crate::faults::stream as stream_faults;
use crate::faults::{BodyFault, Fault};
use json::Bare;
use mock_core::RequestError;
use mock_core::engine::{GeneratePlan, Run};
use mock_core::model::Tokenizer;
use mock_core::release::SglangVersion;
use mock_core::request as native;
use mock_core::wire::{
    self, DONE_EVENT, Due, EncodeCtx, Finished, NeverRan, WaitingAbort, sse_event,
};
use mock_core::witness::Route;
pub(super) use request::Api;
use response::{Answer, ChunkTranslator, ErrorEvent, Finish, ItemView, Span, Translated};

/// `POST /v1/completions`.
pub(crate) async fn completions(
    State(state): State<AppState>,
    method: Method,
    Conn(conn): Conn,
    headers: HeaderMap,
    body: Result<OpenAiJson, ApiError>,
) -> Response {
    let answer = match body {
        Ok(OpenAiJson(body)) => {
            handle(state.clone(), conn, &headers, &body, Api::Completions).await
        }
        Err(err) => Err(err),
    };
    answer.unwrap_or_else(|err| error_response(err, &state, &method, "/v1/completions"))
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(
    State(state): State<AppState>,
    method: Method,
    Conn(conn): Conn,
    headers: HeaderMap,
    body: Result<OpenAiJson, ApiError>,
) -> Response {
    let answer = match body {
        Ok(OpenAiJson(body)) => handle(state.clone(), conn, &headers, &body, Api::Chat).await,
        Err(err) => Err(err),
    };
    answer.unwrap_or_else(|err| error_response(err, &state, &method, "/v1/chat/completions"))
}

async fn handle(
    state: AppState,
    conn: Option<ConnHandle>,
    headers: &HeaderMap,
    body: &Value,
    api: Api,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let config = state.config();
    let served_model_name = state.served_model_name();
    let openai = request::translate(
        api,
        body,
        config,
        &served_model_name,
        state.model().tokenizer(),
    )
    .inspect_err(
        |err| tracing::info!(error = %err, path = api.path(), "rejected OpenAI request"),
    )?;
    let fault = decide_fault(&state, api.path(), openai.stream, headers)?;
    if let Some(fault) = &fault
        && let Some(response) = http_fault(&state, fault, conn.as_ref()).await
    {
        return Ok(response);
    }
    // The native body is ours, so it always parses; SGLang's planner then checks the values.
    let native_body = serde_json::to_vec(&openai.native).unwrap_or_default();
    let plan = native::parse_generate(&native_body)
        .and_then(|parsed| {
            native::plan_generate(&parsed, config, state.model().tokenizer(), &mut UuidRids)
        })
        .map_err(openai_error)?;
    // Aborts happen in the engine; every other fault rewrites the OpenAI answer (or leaves it alone).
    let engine_fault = fault.as_ref().and_then(Fault::engine).cloned();
    let body_fault = fault.as_ref().and_then(Fault::body).cloned();
    let created = unix_seconds();
    let stream = openai.stream;
    let routes_row_len = (config.num_hidden_layers * config.num_experts_per_tok) as usize;
    let events = |_: &GeneratePlan| OpenAiEvents {
        translator: ChunkTranslator::new(openai.clone(), created),
        body_fault,
        routes_row_len,
        closed: false,
    };
    let route = match api {
        Api::Completions => Route::Completions,
        Api::Chat => Route::ChatCompletions,
    };
    let witness = Witness::of(&state, route, stream, fault.as_ref());
    // What fails in the engine or the queue passes in SGLang's shape (a full queue's 503), but a `ValueError`, the
    // first refused item's (`_wait_one_response` raises it), is the OpenAI layer's `BadRequestError` as every
    // handler catches it (`serving_chat.py`, `serving_completions.py`: `except ValueError`).
    let outcome = execute(&state, plan, engine_fault, witness.clone(), started, events)
        .await
        .map_err(|err| match err {
            ApiError::Value(message) => ApiError::OpenAiBadRequest(message),
            other @ (ApiError::Validation(_)
            | ApiError::Pydantic(_)
            | ApiError::Http { .. }
            | ApiError::Internal(_)
            | ApiError::OpenAiBadRequest(_)
            | ApiError::OpenAi { .. }
            | ApiError::Contract(_)
            | ApiError::Unauthorized) => other,
        })?;
    // What the answer carries, to record once it is sure to be sent.
    let answered;
    let views = match outcome {
        Outcome::Stream(events) => {
            debug_assert!(stream, "only a streamed request is answered with a stream");
            // Body faults acted on the chunks as `events` wrote them.
            let body = match fault {
                Some(Fault::Stream(fault)) => {
                    let fault = stream_faults::EventFault::Stream(fault);
                    Body::from_stream(stream_faults::apply(
                        events,
                        fault,
                        FORMAT,
                        config.sglang_version,
                    ))
                }
                Some(Fault::Http(_) | Fault::Body(_) | Fault::Engine(_)) | None => {
                    Body::from_stream(events)
                }
            };
            return Ok(sse_response(body));
        }
        Outcome::Ran { plan, ran } => {
            wire::check_serialisable(config.sglang_version, &plan, &ran.run)?;
            let tok = plan
                .return_text_in_logprobs
                .then_some(state.model().tokenizer());
            let mut views = finished_views(&plan, &ran, tok, config.sglang_version);
            if openai.return_meta_info {
                attach_meta_info(&mut views, &plan, &ran, config, state.model())?;
            }
            answered = Answered::Ran(plan, ran);
            views
        }
        Outcome::NeverRan {
            plan,
            how,
            weight_version,
        } => {
            let views = never_ran_views(
                &plan,
                how.in_release(config.sglang_version),
                &weight_version,
            );
            answered = Answered::NeverRan(plan, weight_version);
            views
        }
    };
    // An `n` below 1 runs as one sample per prompt, and then its answer fails (`OpenAiRequest::n_refusal`).
    if let Some(err) = openai.n_refusal(views.len()) {
        return Err(err);
    }
    let mut answer = response::body(&openai, &views, created);
    // Body faults act on the typed answer; the others (a cut, a stall) on its bytes.
    if let Some(body_fault) = fault.as_ref().and_then(Fault::body) {
        faults::mutate(body_fault, &mut answer, routes_row_len);
    }
    let out = match &fault {
        Some(fault) => stream_faults::non_stream_body(fault, answer.to_vec(), FORMAT).await?,
        None => answer.to_vec(),
    };
    if let Some(witness) = &witness {
        answered.record(witness);
    }
    Ok(json_response(StatusCode::OK, out))
}

/// The views of a finished run's items, in order.
fn finished_views(
    plan: &GeneratePlan,
    ran: &drive::Ran,
    tok: Option<&Tokenizer>,
    version: SglangVersion,
) -> Vec<ItemView> {
    let current = &*ran.versions.current;
    plan.items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| {
            let generation = ran.run.generation(i)?;
            let spans = version.weight_version_spans.then(|| {
                let events = ran.versions.events.get(i).map_or(&[][..], Vec::as_slice);
                wire::weight_version_spans(events, current, generation.output_ids().len())
            });
            let weight_version = wire::reported_version(spans.as_deref(), current);
            let mut view = ItemView::generated(item, generation, tok, weight_version, 0);
            view.cached_tokens = ran.run.cached_tokens(i) as u64;
            view.weight_versions = spans.map(|spans| spans.iter().map(Span::of).collect());
            Some(view)
        })
        .collect()
}

/// `return_meta_info`: each choice carries its item's `meta_info` as `/generate` would answer it (the
/// tokenizer manager's `ret_item["meta_info"]`, `serving_chat.py`).
fn attach_meta_info(
    views: &mut [ItemView],
    plan: &GeneratePlan,
    ran: &drive::Ran,
    config: &mock_core::ServerConfig,
    model: &mock_core::model::Model,
) -> Result<(), ApiError> {
    let ctx = ran.encode_ctx(config, model, plan);
    let body = wire::encode_body(&ctx, plan, &ran.run, &ran.e2e, ran.sent_ts)?;
    let native: Value = serde_json::from_slice(&body)
        .map_err(|err| ApiError::Internal(format!("the native body is not JSON: {err}")))?;
    let items = match native {
        Value::Array(items) => items,
        item @ (Value::Null
        | Value::Bool(_)
        | Value::Number(_)
        | Value::String(_)
        | Value::Object(_)) => vec![item],
    };
    for (view, item) in views.iter_mut().zip(items) {
        view.meta_info = item.get("meta_info").map(|meta| Bare(meta.to_string()));
    }
    Ok(())
}

/// The views of items that never ran: no output, and what SGLang's abort objects report of them (0.5.3's
/// abort before prefill has no `weight_version`).
fn never_ran_views(plan: &GeneratePlan, how: NeverRan<'_>, weight_version: &str) -> Vec<ItemView> {
    let (finish, weight_version) = match how {
        NeverRan::Waiting {
            reason: WaitingAbort::Aborted,
            ..
        } => (
            Finish::abort(wire::WAITING_ABORT_MESSAGE, None),
            Some(weight_version),
        ),
        NeverRan::Waiting {
            reason:
                WaitingAbort::Refused {
                    status_code,
                    message,
                },
            ..
        } => (
            Finish::abort(message, Some(status_code)),
            Some(weight_version),
        ),
        NeverRan::BeforePrefill => (Finish::abort(wire::BEFORE_PREFILL_MESSAGE, None), None),
    };
    plan.items
        .iter()
        .map(|item| ItemView::empty(item, finish.clone(), 0, weight_version))
        .collect()
}

/// The OpenAI events of a streamed request, written from the run's typed state after each tick: each due
/// item becomes its chunks, an abort with a status (a refusal, a full queue) or an engine failure the OpenAI
/// error event that ends the stream, then chat's finish chunks, the usage chunk and `[DONE]`.
struct OpenAiEvents {
    translator: ChunkTranslator,
    /// A body fault acts on every chunk (not on the error event).
    body_fault: Option<BodyFault>,
    /// The length of a routes row, for the routes faults.
    routes_row_len: usize,
    closed: bool,
}

impl OpenAiEvents {
    fn view(&mut self, item: usize, view: &ItemView, out: &mut VecDeque<Bytes>) {
        match self.translator.event(item, view) {
            Translated::Chunks(chunks) => self.chunks(chunks, out),
            Translated::Error(error) => self.close(&error, out),
        }
    }

    fn chunks(&self, chunks: Vec<Answer>, out: &mut VecDeque<Bytes>) {
        for mut chunk in chunks {
            if let Some(fault) = &self.body_fault {
                faults::mutate(fault, &mut chunk, self.routes_row_len);
            }
            out.push_back(sse_event(&chunk.to_vec()));
        }
    }

    /// The error event, then `[DONE]`: nothing more is sent.
    fn close(&mut self, error: &ErrorEvent, out: &mut VecDeque<Bytes>) {
        out.push_back(sse_event(&error.to_vec()));
        out.push_back(Bytes::from_static(DONE_EVENT));
        self.closed = true;
    }
}

impl Events for OpenAiEvents {
    fn after_tick(
        &mut self,
        ctx: &EncodeCtx<'_>,
        plan: &GeneratePlan,
        run: &Run,
        _finished: &mut dyn FnMut(usize) -> Finished,
        out: &mut VecDeque<Bytes>,
    ) {
        let tok = ctx.return_text_in_logprobs.then_some(ctx.tokenizer);
        for (i, due) in wire::due(plan, run, run.progress()) {
            if self.closed {
                return;
            }
            match due {
                Due::Chunk { generation, .. } => {
                    let from = self.translator.logprobs_sent(i);
                    let item = &plan.items[i];
                    let mut view =
                        ItemView::generated(item, generation, tok, ctx.weight_version, from);
                    view.cached_tokens = run.cached_tokens(i) as u64;
                    self.view(i, &view, out);
                }
                Due::Rejected(refusal) => {
                    self.close(&ErrorEvent::abort(&refusal.message, 400), out)
                }
                Due::Failed(err) => {
                    let err = ApiError::from(err.clone());
                    let error = ErrorEvent::abort(&err.client_message(), err.status());
                    self.close(&error, out);
                }
            }
        }
    }

    fn never_ran(
        &mut self,
        ctx: &EncodeCtx<'_>,
        plan: &GeneratePlan,
        how: NeverRan<'_>,
        out: &mut VecDeque<Bytes>,
    ) {
        for (i, view) in never_ran_views(plan, how.in_release(ctx.version), ctx.weight_version)
            .iter()
            .enumerate()
        {
            if self.closed {
                return;
            }
            self.view(i, view, out);
        }
    }

    fn end(&mut self, out: &mut VecDeque<Bytes>) {
        if self.closed {
            return;
        }
        let chunks = self.translator.finish();
        self.chunks(chunks, out);
        let request = self.translator.request();
        if request.include_usage && request.n_given == 0 {
            // `i % n` in `calculate_streaming_usage`: the `ZeroDivisionError` ends the stream (0.5.23 live).
            let error = ErrorEvent::new("integer modulo by zero", "BadRequestError", 400);
            self.close(&error, out);
            return;
        }
        out.push_back(Bytes::from_static(DONE_EVENT));
    }

    fn closed(&self) -> bool {
        self.closed
    }
}

/// OpenAI answers under stream faults: a mid-stream error is the OpenAI layer's
/// `create_streaming_error_response` event. Body faults land on the OpenAI fields of the typed answer before
/// it is written ([`faults::mutate`]), so none reaches the byte-level fault layer.
const FORMAT: stream_faults::Format = stream_faults::Format {
    mutate: None,
    error_event: openai_error_event,
};

fn openai_error_event(message: &str, _: SglangVersion) -> Vec<u8> {
    ErrorEvent::new(message, "BadRequestError", 400).to_vec()
}

/// `str(e)` of an uncaught exception whose detail names its class first (`TypeError: unhashable type: 'list'`).
fn exception_text(detail: &str) -> &str {
    match detail.split_once(": ") {
        Some((class, text))
            if class.ends_with("Error") && class.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            text
        }
        Some(_) | None => detail,
    }
}

/// A native `ValueError` is the OpenAI layer's `BadRequestError`, and any other exception its 500
/// `Internal server error: <exception>` (`OpenAIServingBase.handle_request` catches every one); the other kinds
/// keep their shape.
fn openai_error(err: RequestError) -> ApiError {
    match err {
        RequestError::Value(message) => ApiError::OpenAiBadRequest(message),
        RequestError::Internal(detail) => ApiError::OpenAi {
            status: 500,
            err_type: "InternalServerError",
            message: format!("Internal server error: {}", exception_text(&detail)),
        },
        other @ (RequestError::Validation(_) | RequestError::Contract(_)) => other.into(),
    }
}
