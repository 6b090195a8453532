//! `/generate`: the handler, and [`execute`], which runs a validated plan (the OpenAI routes call it too).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::drive::{self, RunCtx};
use super::extract::{Conn, RawBody};
use super::faults::{decide_fault, http_fault};
use super::respond::{json_response, sse_response};
use super::state::AppState;
use crate::control::{Admission, QUEUE_FULL_MESSAGE};
use crate::engine::{GeneratePlan, RidSource};
use crate::error::ApiError;
use crate::faults::stream as stream_faults;
use crate::faults::{EngineFault, Fault};
use crate::request;
use crate::wire::{self, EncodeCtx, WaitingAbort};

/// Fresh request ids as SGLang makes them: `uuid.uuid4().hex`.
#[derive(Debug, Default)]
pub(crate) struct UuidRids;

impl RidSource for UuidRids {
    fn fresh_rid(&mut self) -> String {
        uuid::Uuid::new_v4().simple().to_string()
    }
}

/// `/generate` (POST or PUT): parse, decide the fault, plan, then [`execute`].
pub(crate) async fn generate_handler(
    State(state): State<AppState>,
    Conn(conn): Conn,
    headers: HeaderMap,
    RawBody(bytes): RawBody,
) -> Response {
    let started = Instant::now();
    // Type errors come from FastAPI before the handler runs: a 4xx even for a stream.
    let parsed = match request::parse_generate(&bytes) {
        Ok(parsed) => parsed,
        Err(err) => {
            tracing::info!(error = %err, "rejected /generate body");
            return err.into_response();
        }
    };
    let fault = match decide_fault(&state, "/generate", parsed.stream, &headers) {
        Ok(fault) => fault,
        Err(err) => return err.into_response(),
    };
    if let Some(fault) = &fault
        && let Some(response) = http_fault(&state, fault, conn.as_ref()).await
    {
        return response;
    }
    let plan = request::plan_generate(
        &parsed,
        state.config(),
        state.model().tokenizer(),
        &mut UuidRids,
    );
    match plan {
        Ok(plan) => execute(&state, plan, fault, started).await,
        Err(err @ (ApiError::Value(_) | ApiError::Validation(_))) if parsed.stream => {
            tracing::info!(error = %err, "rejected streamed /generate request");
            sse_response(Body::from(wire::error_stream_body(&err)))
        }
        Err(err) => {
            tracing::info!(error = %err, "rejected /generate request");
            err.into_response()
        }
    }
}

/// Runs a validated plan: abort shapes that never reach the scheduler, admission, the engine, and the
/// stream, body and abort faults of `fault` (HTTP-level faults were applied before planning). The OpenAI
/// routes call this too, with only the abort faults, and translate what it answers.
pub(crate) async fn execute(
    state: &AppState,
    plan: GeneratePlan,
    fault: Option<Fault>,
    started: Instant,
) -> Response {
    let span = tracing::info_span!(
        "generate",
        rid = %plan.items.first().map(|i| i.rid.as_str()).unwrap_or(""),
        items = plan.items.len(),
        stream = plan.stream,
    );
    let abort_after = match &fault {
        Some(Fault::Engine(engine)) => match engine {
            EngineFault::AbortWaiting => {
                return never_scheduled(state, &plan, NeverScheduled::Waiting, started);
            }
            EngineFault::AbortBeforePrefill => {
                return never_scheduled(state, &plan, NeverScheduled::BeforePrefill, started);
            }
            EngineFault::AbortRunning { after } => Some(*after as usize),
        },
        Some(Fault::Http(_) | Fault::Body(_) | Fault::Stream(_)) | None => None,
    };
    let tokens: usize = plan
        .items
        .iter()
        .map(|i| i.request.input_ids.len() + i.request.params.max_new_tokens as usize)
        .sum();
    let guard = state.load_guard(tokens);
    let control = Arc::clone(state.control());
    let handle = control.register(plan.items.iter().map(|i| i.rid.clone()).collect());
    let ctx = RunCtx {
        config: Arc::clone(state.shared_config()),
        model: Arc::clone(state.model()),
        started,
        control: Arc::clone(&control),
        ctl: Arc::clone(handle.ctl()),
        latency: state.config().latency,
        abort_after,
        weight_version: control.weight_version(),
        metrics: Arc::clone(state.metrics()),
    };
    if plan.stream {
        span.in_scope(|| tracing::info!("streaming"));
        let stream = drive::sse_stream(ctx, plan, handle, guard);
        let body = match fault.and_then(stream_faults::EventFault::of) {
            Some(fault) => {
                Body::from_stream(stream_faults::apply(stream, fault, stream_faults::NATIVE))
            }
            None => Body::from_stream(stream),
        };
        return sse_response(body);
    }
    let result = match control.admit(&handle).await {
        Admission::Run(ticket) => {
            let result = drive::run_to_end(&ctx, &plan).await;
            drop(ticket);
            result
        }
        Admission::QueueFull => Err(ApiError::Http {
            status: 503,
            message: QUEUE_FULL_MESSAGE.to_owned(),
        }),
        Admission::AbortedWaiting => {
            state
                .metrics()
                .aborted_requests
                .fetch_add(1, Ordering::Relaxed);
            let encode = EncodeCtx::new(ctx.config.profile, &ctx.model, &plan, &ctx.weight_version);
            let e2e = started.elapsed().as_secs_f64();
            Ok(wire::join_body(
                &plan,
                wire::waiting_abort_objects(&encode, &plan, WaitingAbort::Aborted, e2e, false),
            ))
        }
    };
    drop(handle);
    drop(guard);
    let result = match (result, &fault) {
        (Ok(body), Some(fault)) => {
            stream_faults::non_stream_body(fault, body, stream_faults::NATIVE).await
        }
        (result, _) => result,
    };
    match result {
        Ok(body) => {
            tracing::info!(parent: &span, latency_ms = started.elapsed().as_millis() as u64, "done");
            json_response(StatusCode::OK, body)
        }
        Err(err) => {
            tracing::info!(parent: &span, error = %err, "failed");
            err.into_response()
        }
    }
}

/// Where a request that never ran was aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NeverScheduled {
    Waiting,
    BeforePrefill,
}

/// The abort shapes of a request that never reaches the scheduler: aborted in the waiting queue, or (MID)
/// before prefill.
fn never_scheduled(
    state: &AppState,
    plan: &GeneratePlan,
    kind: NeverScheduled,
    started: Instant,
) -> Response {
    let weight_version = state.control().weight_version();
    let ctx = EncodeCtx::new(state.config().profile, state.model(), plan, &weight_version);
    let e2e = started.elapsed().as_secs_f64();
    let objects = if kind == NeverScheduled::Waiting {
        wire::waiting_abort_objects(&ctx, plan, WaitingAbort::Aborted, e2e, plan.stream)
    } else {
        plan.items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let mut json = Vec::new();
                let index = (plan.stream && plan.is_batch).then_some(i);
                wire::encode_before_prefill(&mut json, &ctx, item, index);
                json
            })
            .collect()
    };
    if plan.stream {
        let mut out = Vec::new();
        for object in &objects {
            out.extend_from_slice(&wire::sse_event(object));
        }
        out.extend_from_slice(wire::DONE_EVENT);
        sse_response(Body::from(out))
    } else {
        json_response(StatusCode::OK, wire::join_body(plan, objects))
    }
}
