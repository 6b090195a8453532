//! `/generate`: the handler, and [`execute`], which runs a validated plan and hands back a typed
//! [`Outcome`] that each route encodes (the OpenAI routes call it too).

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures_util::Stream;
use futures_util::future::Either;

use super::drive::{self, RunCtx, unix_now};
use super::extract::{Conn, RawBody, bytes_body_error, error_response, read_as_bytes};
use super::faults::{decide_fault, http_fault};
use super::respond::{json_response, sse_response};
use super::state::AppState;
use super::witness::Witness;
use crate::control::{Admission, QUEUE_FULL_MESSAGE};
use crate::error::ApiError;
use crate::faults::stream as stream_faults;
use crate::faults::{EngineFault, Fault};
use mock_core::RequestError;
use mock_core::engine::{GeneratePlan, RidSource};
use mock_core::model::mix;
use mock_core::request;
use mock_core::wire::{self, EncodeCtx, NeverRan, WaitingAbort};
use mock_core::witness::Route;

/// Fresh request ids as SGLang makes them: `uuid.uuid4().hex`, version and variant bits included.
///
/// The random bits come from a generator seeded once per process from the system's randomness, not from a
/// `getrandom` call per id (2% of a 16-token request's time): the `n`-th id's halves are the model's hash
/// ([`mix`], a bijection in its value) of `n` under each half of the seed, so no two ids of a process are
/// equal but by a collision of both halves' remaining 60 and 62 bits, and no process can predict another's.
#[derive(Debug, Default)]
pub(crate) struct UuidRids;

/// The seed of every fresh id of this process.
static RID_SEED: OnceLock<(u64, u64)> = OnceLock::new();
/// How many fresh ids this process has made.
static RIDS_MADE: AtomicU64 = AtomicU64::new(0);

impl RidSource for UuidRids {
    fn fresh_rid(&mut self) -> String {
        let (high, low) = *RID_SEED.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair());
        let n = RIDS_MADE.fetch_add(1, Ordering::Relaxed);
        let bits = (u128::from(mix(high, n)) << 64) | u128::from(mix(low, n));
        uuid::Builder::from_random_bytes(bits.to_be_bytes())
            .into_uuid()
            .simple()
            .to_string()
    }
}

/// `/generate` (POST or PUT): parse, decide the fault, plan, [`execute`], then encode what it hands back
/// as SGLang's native answer.
/// `POST`/`PUT /generate`: [`generate`], its errors answered as SGLang's, a validation error with FastAPI's frame.
pub(crate) async fn generate_handler(
    State(state): State<AppState>,
    method: Method,
    conn: Conn,
    headers: HeaderMap,
    body: RawBody,
) -> Response {
    match generate(State(state.clone()), conn, headers, body).await {
        Ok(response) => response,
        Err(err) => error_response(err, &state, &method, "/generate"),
    }
}

async fn generate(
    State(state): State<AppState>,
    Conn(conn): Conn,
    headers: HeaderMap,
    RawBody(bytes): RawBody,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let version = state.config().sglang_version;
    if read_as_bytes(&headers)
        && !bytes.is_empty()
        && let Some(err) = bytes_body_error(&bytes, |json| {
            match request::admit_generate(json, version) {
                Err(RequestError::Validation(errors)) => Some(errors),
                Ok(_) | Err(_) => None,
            }
        })
    {
        return Err(err);
    }
    // Type errors come from FastAPI before the handler runs, and 0.5.23's contract gate runs before the
    // stream starts: a 4xx even for a stream.
    let parsed =
        request::admit_generate(&bytes, state.config().sglang_version).inspect_err(|err| {
            tracing::info!(error = %err, "rejected /generate body");
        })?;
    let fault = decide_fault(&state, "/generate", parsed.stream, &headers)?;
    if let Some(fault) = &fault
        && let Some(response) = http_fault(&state, fault, conn.as_ref()).await
    {
        return Ok(response);
    }
    let plan = request::plan_generate(
        &parsed,
        state.config(),
        state.model().tokenizer(),
        &mut UuidRids,
    );
    let plan = match plan {
        Ok(plan) => plan,
        Err(err) if parsed.stream => return streamed_refusal(&state, err.into()),
        Err(err) => {
            tracing::info!(error = %err, "rejected /generate request");
            return Err(err.into());
        }
    };
    let engine_fault = fault.as_ref().and_then(Fault::engine).cloned();
    let events = |plan: &GeneratePlan| drive::NativeEvents::new(state.config(), plan);
    let stream = plan.stream;
    let witness = Witness::of(&state, Route::Generate, stream, fault.as_ref());
    let outcome = match execute(&state, plan, engine_fault, witness.clone(), started, events).await
    {
        Ok(outcome) => outcome,
        // What is refused before the stream starts (a duplicate rid) is refused inside it.
        Err(err) if stream => return streamed_refusal(&state, err),
        Err(err) => return Err(err),
    };
    let encode =
        |plan, version| EncodeCtx::new(state.config().sglang_version, state.model(), plan, version);
    // What the answer carries, to record once it is sure to be sent.
    let served;
    let body = match outcome {
        Outcome::Stream(stream) => {
            let body = match fault.and_then(stream_faults::EventFault::of) {
                Some(fault) => Body::from_stream(stream_faults::apply(
                    stream,
                    fault,
                    stream_faults::NATIVE,
                    state.config().sglang_version,
                )),
                None => Body::from_stream(stream),
            };
            return Ok(sse_response(body));
        }
        Outcome::Ran { plan, ran } => {
            let ctx = ran.encode_ctx(state.config(), state.model(), &plan);
            let body = wire::encode_body(&ctx, &plan, &ran.run, &ran.e2e, ran.sent_ts)?;
            served = Some(Answered::Ran(plan, ran));
            body
        }
        Outcome::NeverRan {
            plan,
            how,
            weight_version,
        } => {
            let ctx = encode(&plan, &weight_version);
            let body = wire::join_body(
                &plan,
                wire::never_ran_objects(&ctx, &plan, how, false, unix_now()),
            );
            served = Some(Answered::NeverRan(plan, weight_version));
            body
        }
    };
    let body = match &fault {
        Some(fault) => stream_faults::non_stream_body(fault, body, stream_faults::NATIVE).await?,
        None => body,
    };
    if let (Some(witness), Some(served)) = (&witness, served) {
        served.record(witness);
    }
    Ok(json_response(StatusCode::OK, body))
}

/// A streamed request refused before its first event, as SGLang's `stream_results` refuses it after the 200
/// headers: a `ValueError` (and FastAPI's own 400s, which the mock raises at the same point) is the error frame
/// then `[DONE]`; an uncaught exception (a `TypeError` of a sampling parameter) breaks the connection with no
/// event and no `[DONE]`. Any other error is answered before the stream, as it is.
fn streamed_refusal(state: &AppState, err: ApiError) -> Result<Response, ApiError> {
    match err {
        ApiError::Value(_) | ApiError::Validation(_) | ApiError::Pydantic(_) => {
            tracing::info!(error = %err, "refused streamed /generate request");
            let version = state.config().sglang_version;
            Ok(sse_response(Body::from(wire::error_stream_body(
                &err.client_message(),
                version,
            ))))
        }
        ApiError::Internal(_) => {
            tracing::error!(error = %err, "uncaught error in a streamed /generate request");
            Ok(sse_response(Body::from_stream(futures_util::stream::once(
                async {
                    // Pending once, so that the 200 headers are flushed before the connection breaks.
                    tokio::task::yield_now().await;
                    Err::<Bytes, _>(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        "an uncaught exception ended the stream",
                    ))
                },
            ))))
        }
        err @ (ApiError::Http { .. }
        | ApiError::OpenAiBadRequest(_)
        | ApiError::OpenAi { .. }
        | ApiError::Contract(_)
        | ApiError::Unauthorized) => {
            tracing::info!(error = %err, "rejected /generate request");
            Err(err)
        }
    }
}

/// What a non-stream answer carried, for the ledger.
pub(crate) enum Answered {
    Ran(GeneratePlan, drive::Ran),
    NeverRan(GeneratePlan, Arc<str>),
}

impl Answered {
    /// Records every item of the answer.
    pub(crate) fn record(&self, witness: &Witness) {
        match self {
            Answered::Ran(plan, ran) => {
                witness.record_run(plan, &ran.run, ran.versions.now(), &ran.versions.events);
            }
            Answered::NeverRan(plan, weight_version) => {
                witness.record_never_ran(plan, weight_version);
            }
        }
    }
}

/// What [`execute`] hands back for a route to encode.
pub(crate) enum Outcome<S> {
    /// A non-stream request that ran to its end.
    Ran { plan: GeneratePlan, ran: drive::Ran },
    /// A non-stream request whose items never ran: aborted in the waiting queue, or before prefill.
    NeverRan {
        plan: GeneratePlan,
        how: NeverRan<'static>,
        weight_version: Arc<str>,
    },
    /// A streamed request: its events, written by the route's [`drive::Events`].
    Stream(S),
}

/// Runs a validated plan: the abort shapes that never reach the scheduler, admission, the engine, and the
/// engine fault (HTTP-level faults were applied before planning; body and stream faults are the route's, on
/// what it encodes). A stream's events are written by the route's `events` for the plan, and its items are
/// recorded in the ledger by `witness` as they end; a non-stream answer's are the route's to record, once it
/// is sent. Errors that end the request (a full queue's 503 for a non-stream request, an engine failure) come
/// back as `Err`.
pub(crate) async fn execute<E: drive::Events>(
    state: &AppState,
    plan: GeneratePlan,
    fault: Option<EngineFault>,
    witness: Option<Witness>,
    started: Instant,
    events: impl FnOnce(&GeneratePlan) -> E,
) -> Result<Outcome<impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static>, ApiError> {
    // One line per request costs a formatted write to stderr per answer (a sixth of a 16-token answer's time),
    // so requests log at debug, as SGLang logs them only with `--log-requests`; `RUST_LOG=debug` shows them.
    let span = tracing::debug_span!(
        "generate",
        rid = %plan.items.first().map(|i| i.rid.as_str()).unwrap_or(""),
        items = plan.items.len(),
        stream = plan.stream,
    );
    let (abort_after, never_ran) = match fault {
        Some(EngineFault::AbortWaiting) => {
            let e2e = started.elapsed().as_secs_f64();
            let reason = WaitingAbort::Aborted;
            (None, Some(NeverRan::Waiting { reason, e2e }))
        }
        Some(EngineFault::AbortBeforePrefill) => (None, Some(NeverRan::BeforePrefill)),
        Some(EngineFault::AbortRunning { after }) => (Some(after as usize), None),
        None => (None, None),
    };
    if let Some(how) = never_ran {
        let weight_version = state.control().weight_version();
        if !plan.stream {
            return Ok(Outcome::NeverRan {
                plan,
                how,
                weight_version,
            });
        }
        let encode = EncodeCtx::new(
            state.config().sglang_version,
            state.model(),
            &plan,
            &weight_version,
        );
        let stream = drive::never_ran_stream(&encode, &plan, how, events(&plan));
        if let Some(witness) = &witness {
            witness.record_never_ran(&plan, &weight_version);
        }
        return Ok(Outcome::Stream(Either::Left(stream)));
    }
    let control = Arc::clone(state.control());
    let rids = plan.items.iter().map(|i| i.rid.clone()).collect();
    let unique = state.config().sglang_version.duplicate_rids_refused;
    let prompts = plan.items.iter().map(|i| i.request.input_ids.len()).sum();
    let handle = control
        .register(rids, prompts, unique)
        .map_err(|rid| ApiError::value(format!("Duplicate request ID detected: {rid}")))?;
    // Admitted: the unseeded items take their draws, in arrival order.
    let mut plan = plan;
    state.draws().assign(&mut plan);
    let ctx = RunCtx {
        config: Arc::clone(state.shared_config()),
        model: Arc::clone(state.model()),
        started,
        control: Arc::clone(&control),
        ctl: Arc::clone(handle.ctl()),
        latency: state.config().latency,
        abort_after,
        versions: drive::VersionLog::new(&control),
        metrics: Arc::clone(state.metrics()),
        witness,
        cache: state.prefix_cache().cloned(),
        occupancy: Arc::clone(state.occupancy()),
        batcher: state.batcher().cloned(),
    };
    if plan.stream {
        span.in_scope(|| tracing::debug!("streaming"));
        let events = events(&plan);
        let scheduled = ctx.batcher.is_some();
        let stream = drive::sse_stream(ctx, plan, handle, events);
        let stream = match scheduled {
            true => Either::Right(drive::detach(stream)),
            false => Either::Left(stream),
        };
        return Ok(Outcome::Stream(Either::Right(stream)));
    }
    let aborted_waiting = |plan| {
        let e2e = started.elapsed().as_secs_f64();
        Ok(Outcome::NeverRan {
            plan,
            how: NeverRan::Waiting {
                reason: WaitingAbort::Aborted,
                e2e,
            },
            weight_version: control.weight_version(),
        })
    };
    let outcome = match control.admit(&handle).await {
        Admission::Run(ticket) => {
            let result = drive::run_to_end(ctx, &plan).await;
            drop(ticket);
            match result {
                Ok(Some(ran)) => Ok(Outcome::Ran { plan, ran }),
                Ok(None) => aborted_waiting(plan),
                Err(err) => Err(err),
            }
        }
        Admission::QueueFull => Err(ApiError::Http {
            status: 503,
            message: QUEUE_FULL_MESSAGE.to_owned(),
        }),
        Admission::AbortedWaiting => aborted_waiting(plan),
    };
    drop(handle);
    match &outcome {
        Ok(_) => {
            tracing::debug!(parent: &span, latency_ms = started.elapsed().as_millis() as u64, "done");
        }
        // A failure (a full queue, an engine error) stays in the default log.
        Err(err) => tracing::info!(error = %err, "failed /generate request"),
    }
    outcome
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// Every fresh id reads as `uuid.uuid4().hex` does (32 lowercase hex digits of a version-4, RFC 4122 uuid),
    /// and none repeats.
    #[test]
    fn fresh_rids_are_distinct_uuid4_hex() {
        let mut seen = HashSet::new();
        for _ in 0..20_000 {
            let rid = UuidRids.fresh_rid();
            assert_eq!(rid.len(), 32, "{rid}");
            assert!(
                rid.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{rid}"
            );
            let uuid = uuid::Uuid::parse_str(&rid).expect("a uuid");
            assert_eq!(uuid.get_version_num(), 4, "{rid}");
            assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122, "{rid}");
            assert!(seen.insert(rid.clone()), "{rid} repeats");
        }
    }
}
