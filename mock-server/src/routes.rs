//! The axum router: `/generate` and the worker endpoints routers and RL frameworks call, plus the API-key
//! middleware. Handlers share one [`AppState`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, get, on, post};
use futures_util::StreamExt;
use serde_json::json;

use crate::admin;
use crate::config::{Profile, SGLANG_VERSION, ServerConfig};
use crate::conn::ConnHandle;
use crate::control::{Admission, Control};
use crate::engine::{Generation, ItemRequest, SamplingParams};
use crate::error::ApiError;
use crate::fault::{FAULT_HEADER, Fault, FaultKind, Faults};
use crate::generate::stream_faults;
use crate::generate::{self, UuidRids};
use crate::metrics::Metrics;
use crate::model::Model;
use crate::openai;
use crate::request;
use crate::wire::{self, WaitingAbort};

/// Shared server state: configuration, the model, and load counters. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Arc<ServerConfig>,
    model: Arc<Model>,
    running_requests: AtomicUsize,
    running_tokens: AtomicUsize,
    control: Arc<Control>,
    faults: Faults,
    metrics: Arc<Metrics>,
    /// `true` once the server has begun to shut down: a `hang` ends then instead of holding the shutdown.
    shutting_down: tokio::sync::watch::Sender<bool>,
}

/// Why a server could not be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot build the toy model (vocab_size {vocab_size}, seed {seed})")]
    Model {
        vocab_size: u32,
        seed: u64,
        #[source]
        source: crate::model::ModelError,
    },
    #[error("the fault configuration is not valid")]
    Faults(#[source] crate::fault::FaultError),
}

impl AppState {
    pub fn new(config: ServerConfig) -> Result<AppState, StateError> {
        config.faults.validate().map_err(StateError::Faults)?;
        let model = Model::new(config.model_config()).map_err(|source| StateError::Model {
            vocab_size: config.vocab_size,
            seed: config.seed,
            source,
        })?;
        Ok(AppState::with_model(config, Arc::new(model)))
    }

    /// A state around an already built model (the oracle and tests share one).
    pub fn with_model(config: ServerConfig, model: Arc<Model>) -> AppState {
        let control = Control::new(
            config.profile,
            &config.weight_version,
            config.max_running_requests,
            config.max_queued_requests,
        );
        let faults = Faults::new(config.faults.clone());
        AppState {
            inner: Arc::new(Inner {
                config: Arc::new(config),
                model,
                running_requests: AtomicUsize::new(0),
                running_tokens: AtomicUsize::new(0),
                control,
                faults,
                metrics: Arc::new(Metrics::default()),
                shutting_down: tokio::sync::watch::Sender::new(false),
            }),
        }
    }

    /// Marks the server as shutting down (the graceful shutdown of [`crate::run`] calls it).
    pub fn begin_shutdown(&self) {
        self.inner.shutting_down.send_replace(true);
    }

    /// Resolves once the server has begun to shut down.
    pub async fn shutting_down(&self) {
        let mut rx = self.inner.shutting_down.subscribe();
        // The sender lives as long as the state, so `wait_for` only ends when the flag is set.
        let _ = rx.wait_for(|&down| down).await;
    }

    /// The control plane: in-flight registry, pause gate, queue, weight version.
    pub fn control(&self) -> &Arc<Control> {
        &self.inner.control
    }

    /// The fault schedule and its counters.
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// Requests counted by `/get_load` (running plus waiting) and their token budget.
    pub fn load(&self) -> (usize, usize) {
        (
            self.inner.running_requests.load(Ordering::Relaxed),
            self.inner.running_tokens.load(Ordering::Relaxed),
        )
    }

    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.inner.model
    }

    fn load_guard(&self, tokens: usize) -> LoadGuard {
        self.inner.running_requests.fetch_add(1, Ordering::Relaxed);
        self.inner
            .running_tokens
            .fetch_add(tokens, Ordering::Relaxed);
        LoadGuard {
            state: self.clone(),
            tokens,
        }
    }
}

/// Counts a request as running for `/get_load` until dropped (for streams: until the body is dropped).
#[derive(Debug)]
struct LoadGuard {
    state: AppState,
    tokens: usize,
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.state
            .inner
            .running_requests
            .fetch_sub(1, Ordering::Relaxed);
        self.state
            .inner
            .running_tokens
            .fetch_sub(self.tokens, Ordering::Relaxed);
    }
}

/// The router with every endpoint, the API-key middleware when a key is configured, and SGLang's 404/405.
pub fn router(state: AppState) -> Router {
    let generate_methods = MethodFilter::POST.or(MethodFilter::PUT);
    let get_or_post = MethodFilter::GET.or(MethodFilter::POST);
    let mut app = Router::new()
        .route("/generate", on(generate_methods, generate_handler))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/tokenize", post(openai::tokenize::tokenize))
        .route("/v1/tokenize", post(openai::tokenize::tokenize))
        .route("/detokenize", post(openai::tokenize::detokenize))
        .route("/v1/detokenize", post(openai::tokenize::detokenize))
        .route("/health", get(health))
        .route("/health_generate", get(health_generate))
        .route("/server_info", get(server_info))
        .route("/get_server_info", get(server_info))
        .route("/model_info", get(model_info))
        .route("/get_model_info", get(model_info))
        .route("/get_weight_version", get(weight_version))
        .route("/weight_version", get(weight_version))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{*model}", get(retrieve_model))
        .route("/get_load", get(get_load))
        .route("/v1/loads", get(v1_loads))
        .route("/flush_cache", on(get_or_post, admin::flush_cache))
        .route("/ping", get(ping))
        .route("/abort_request", post(admin::abort_request))
        .route("/pause_generation", post(admin::pause_generation))
        .route("/continue_generation", post(admin::continue_generation))
        .route(
            "/update_weights_from_disk",
            post(admin::update_weights_from_disk),
        )
        .route(
            "/update_weights_from_tensor",
            post(admin::update_weights_from_tensor),
        )
        .route(
            "/update_weights_from_distributed",
            post(admin::update_weights_from_distributed),
        )
        .route(
            "/init_weights_update_group",
            post(admin::init_weights_update_group),
        )
        .route(
            "/destroy_weights_update_group",
            post(admin::destroy_weights_update_group),
        )
        .route("/update_weight_version", post(admin::update_weight_version))
        .route(
            "/release_memory_occupation",
            on(get_or_post, admin::memory_occupation),
        )
        .route(
            "/resume_memory_occupation",
            on(get_or_post, admin::memory_occupation),
        )
        .route("/admin/faults", on(get_or_post, admin::faults))
        .route("/admin/stats", get(admin::stats))
        .route("/metrics", get(admin::metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), http_faults));
    if state.config().api_key.is_some() {
        app = app.layer(middleware::from_fn_with_state(state.clone(), api_key_auth));
    }
    app.with_state(state)
}

/// SGLang's `add_api_key_middleware`: `OPTIONS`, `/health*` and `/metrics*` pass; everything else needs
/// `Authorization: Bearer <key>` exactly.
async fn api_key_auth(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = state.config().api_key.as_deref() else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    if req.method() == Method::OPTIONS
        || path.starts_with("/health")
        || path.starts_with("/metrics")
    {
        return next.run(req).await;
    }
    let authorized = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|given| given == key);
    if authorized {
        next.run(req).await
    } else {
        ApiError::Unauthorized.into_response()
    }
}

async fn not_found() -> Response {
    json_response(StatusCode::NOT_FOUND, br#"{"detail":"Not Found"}"#.to_vec())
}

async fn method_not_allowed() -> Response {
    json_response(
        StatusCode::METHOD_NOT_ALLOWED,
        br#"{"detail":"Method Not Allowed"}"#.to_vec(),
    )
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn json_value(value: &impl serde::Serialize) -> Response {
    json_response(
        StatusCode::OK,
        serde_json::to_vec(value).unwrap_or_default(),
    )
}

/// A JSON object whose keys keep the order given (serde_json's `Value` would sort them), as Python dicts do.
struct Ordered(Vec<(&'static str, serde_json::Value)>);

impl serde::Serialize for Ordered {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// `ordered! {"a": x, "b": y}`: an [`Ordered`] object of `json!` values.
macro_rules! ordered {
    ($($key:literal : $value:expr),* $(,)?) => {
        Ordered(vec![$(($key, json!($value))),*])
    };
}

fn empty_ok() -> Response {
    StatusCode::OK.into_response()
}

/// Read the whole body, refusing more than `limit` bytes with a 413 in SGLang's HTTPException shape.
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<bytes::Bytes, ApiError> {
    let too_large = || ApiError::Http {
        status: 413,
        message: format!("Request body is larger than the limit of {limit} bytes."),
    };
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| {
            ApiError::Validation(format!("Could not read the request body: {err}"))
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(bytes::Bytes::from(buf))
}

/// The `X-Mock-Fault` header of a request: `Ok(None)` without one, an error for one that is not UTF-8.
fn fault_header(headers: &axum::http::HeaderMap) -> Result<Option<&str>, ApiError> {
    match headers.get(FAULT_HEADER) {
        None => Ok(None),
        Some(value) => value.to_str().map(Some).map_err(|_| ApiError::Http {
            status: 400,
            message: "The X-Mock-Fault header is not valid UTF-8.".to_owned(),
        }),
    }
}

/// Pick the fault of a request, answering a bad `X-Mock-Fault` header with a 400 that names the problem.
pub(crate) fn decide_fault(
    state: &AppState,
    endpoint: &str,
    stream: bool,
    headers: &axum::http::HeaderMap,
) -> Result<Option<Fault>, ApiError> {
    let header = fault_header(headers)?;
    let fault = state
        .faults()
        .decide(endpoint, stream, header)
        .map_err(|err| ApiError::Http {
            status: 400,
            message: err.to_string(),
        })?;
    if let Some(fault) = &fault {
        state.faults().record(fault.kind);
        tracing::info!(endpoint, fault = %fault, "injecting fault");
    }
    Ok(fault)
}

/// An HTTP-level fault: `Some(response)` ends the request here, `None` lets it go on (after a `delay`).
pub(crate) async fn http_fault(
    state: &AppState,
    fault: &Fault,
    conn: Option<&ConnHandle>,
) -> Option<Response> {
    match fault.kind {
        FaultKind::Status => Some(status_fault(fault)),
        FaultKind::Delay => {
            tokio::time::sleep(Duration::from_millis(fault.u64("ms", 0))).await;
            None
        }
        FaultKind::Hang => {
            // A hung request must not hold a graceful shutdown for its whole `ms` (ten minutes by default).
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(fault.u64("ms", 600_000))) => {}
                () = state.shutting_down() => {}
            }
            Some(reset_response(conn))
        }
        FaultKind::Reset => Some(reset_response(conn)),
        _ => None,
    }
}

/// The response of a `reset`: the connection's switch is thrown so nothing is written; in process (no
/// connection) the body fails instead.
fn reset_response(conn: Option<&ConnHandle>) -> Response {
    if let Some(conn) = conn {
        conn.reset();
    }
    let failing = futures_util::stream::once(async {
        Err::<bytes::Bytes, _>(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by the `reset` fault",
        ))
    });
    (StatusCode::OK, Body::from_stream(failing)).into_response()
}

/// The `status` fault: SGLang's body for the status, `Retry-After` on a 429.
fn status_fault(fault: &Fault) -> Response {
    let code = fault.u64("code", 500) as u16;
    let message = fault.str("message").map(str::to_owned);
    let err = match code {
        400 => {
            ApiError::value(message.unwrap_or_else(|| "Bad request (injected fault).".to_owned()))
        }
        500 if message.is_none() => ApiError::internal("injected 500"),
        503 => ApiError::Http {
            status: 503,
            message: message.unwrap_or_else(|| generate::QUEUE_FULL_MESSAGE.to_owned()),
        },
        429 => ApiError::Http {
            status: 429,
            message: message.unwrap_or_else(|| "Too many requests.".to_owned()),
        },
        _ => ApiError::Http {
            status: code,
            message: message.unwrap_or_else(|| format!("Injected HTTP {code}.")),
        },
    };
    let mut response = err.into_response();
    if code == 429 {
        let secs = fault.u64("retry_after", 1).to_string();
        if let Ok(value) = axum::http::HeaderValue::from_str(&secs) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
    }
    response
}

/// HTTP-level faults on every endpoint but `/generate` (which decides its own, knowing `stream`), the admin
/// endpoints and `/metrics`.
async fn http_faults(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    // `/generate` and the OpenAI routes decide their own, knowing `stream`.
    if path == "/generate"
        || path == openai::Api::Completions.path()
        || path == openai::Api::Chat.path()
        || path.starts_with("/admin/")
        || path == "/metrics"
    {
        return next.run(req).await;
    }
    let fault = match decide_fault(&state, &path, false, req.headers()) {
        Ok(fault) => fault,
        Err(err) => return err.into_response(),
    };
    if let Some(fault) = fault {
        let conn = req
            .extensions()
            .get::<axum::extract::ConnectInfo<ConnHandle>>()
            .map(|c| c.0.clone());
        if let Some(response) = http_fault(&state, &fault, conn.as_ref()).await {
            return response;
        }
    }
    next.run(req).await
}

async fn generate_handler(State(state): State<AppState>, req: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let conn = parts
        .extensions
        .get::<axum::extract::ConnectInfo<ConnHandle>>()
        .map(|c| c.0.clone());
    let config = state.config();
    let bytes = match read_body(body, config.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(err) => return err.into_response(),
    };
    // Type errors come from FastAPI before the handler runs: a 4xx even for a stream.
    let parsed = match request::parse_generate(&bytes) {
        Ok(parsed) => parsed,
        Err(err) => {
            tracing::info!(error = %err, "rejected /generate body");
            return err.into_response();
        }
    };
    let fault = match decide_fault(&state, "/generate", parsed.stream, &parts.headers) {
        Ok(fault) => fault,
        Err(err) => return err.into_response(),
    };
    if let Some(fault) = &fault
        && let Some(response) = http_fault(&state, fault, conn.as_ref()).await
    {
        return response;
    }
    let plan = request::plan_generate(&parsed, config, state.model().tokenizer(), &mut UuidRids);
    let plan = match plan {
        Ok(plan) => plan,
        Err(err @ (ApiError::Value(_) | ApiError::Validation(_))) if parsed.stream => {
            tracing::info!(error = %err, "rejected streamed /generate request");
            return sse_response(Body::from(generate::error_stream_body(&err)));
        }
        Err(err) => {
            tracing::info!(error = %err, "rejected /generate request");
            return err.into_response();
        }
    };
    execute(&state, plan, fault, started).await
}

/// Run a validated plan: abort shapes that never reach the scheduler, admission, the engine, and the
/// stream, body and abort faults of `fault` (HTTP-level faults were applied before planning). The OpenAI
/// routes call this too, with only the abort faults, and translate what it answers.
pub(crate) async fn execute(
    state: &AppState,
    plan: request::GeneratePlan,
    fault: Option<Fault>,
    started: Instant,
) -> Response {
    let config = state.config();
    let span = tracing::info_span!(
        "generate",
        rid = %plan.items.first().map(|i| i.rid.as_str()).unwrap_or(""),
        items = plan.items.len(),
        stream = plan.stream,
    );
    let _entered = span.enter();
    let fault_kind = fault.as_ref().map(|f| f.kind);
    let weight_version = state.control().weight_version();
    // Abort shapes that never reach the scheduler.
    if let Some(kind @ (FaultKind::AbortWaiting | FaultKind::AbortBeforePrefill)) = fault_kind {
        let ctx = wire::EncodeCtx {
            profile: config.profile,
            tokenizer: state.model().tokenizer(),
            return_text_in_logprobs: plan.return_text_in_logprobs,
            weight_version: &weight_version,
        };
        let e2e = started.elapsed().as_secs_f64();
        let objects = if kind == FaultKind::AbortWaiting {
            generate::waiting_abort_objects(&ctx, &plan, WaitingAbort::Aborted, e2e, plan.stream)
        } else {
            plan.items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let mut json = Vec::new();
                    let index = (plan.stream && plan.is_batch).then_some(i);
                    wire::encode_before_prefill(&mut json, item, index);
                    json
                })
                .collect()
        };
        return if plan.stream {
            let mut out = Vec::new();
            for object in &objects {
                out.extend_from_slice(&generate::sse_event(object));
            }
            out.extend_from_slice(generate::DONE_EVENT);
            sse_response(Body::from(out))
        } else {
            json_response(StatusCode::OK, generate::join_body(&plan, objects))
        };
    }
    let tokens: usize = plan
        .items
        .iter()
        .map(|i| i.request.input_ids.len() + i.request.params.max_new_tokens as usize)
        .sum();
    let guard = state.load_guard(tokens);
    let control = Arc::clone(state.control());
    let handle = control.register(plan.items.iter().map(|i| i.rid.clone()).collect());
    let run = generate::RunCtx {
        config: Arc::clone(&state.inner.config),
        model: Arc::clone(state.model()),
        started,
        control: Some((Arc::clone(&control), Arc::clone(handle.ctl()))),
        latency: config.latency,
        abort_after: (fault_kind == Some(FaultKind::AbortRunning))
            .then(|| fault.as_ref().map_or(1, |f| f.u64("after", 1)) as usize),
        weight_version,
        metrics: Some(Arc::clone(state.metrics())),
    };
    if plan.stream {
        tracing::info!("streaming");
        let stream = generate::sse_stream(run, plan, Some((control, handle)), guard);
        let body = match fault {
            Some(fault) if !fault.kind.is_http_level() => {
                Body::from_stream(stream_faults::apply(stream, fault, stream_faults::NATIVE))
            }
            _ => Body::from_stream(stream),
        };
        return sse_response(body);
    }
    drop(_entered);
    let result = match control.admit(&handle).await {
        Admission::Run(ticket) => {
            // The version is read when the answer is written: a request held back by a weight update
            // reports the new one.
            let result = generate::run_items(&run, &plan)
                .await
                .and_then(|completed| {
                    let version = control.weight_version();
                    generate::encode_body(config, state.model(), &plan, &completed, &version)
                });
            drop(ticket);
            result
        }
        Admission::QueueFull => Err(ApiError::Http {
            status: 503,
            message: generate::QUEUE_FULL_MESSAGE.to_owned(),
        }),
        Admission::AbortedWaiting => {
            state
                .metrics()
                .aborted_requests
                .fetch_add(1, Ordering::Relaxed);
            let ctx = wire::EncodeCtx {
                profile: config.profile,
                tokenizer: state.model().tokenizer(),
                return_text_in_logprobs: plan.return_text_in_logprobs,
                weight_version: &run.weight_version,
            };
            let e2e = started.elapsed().as_secs_f64();
            Ok(generate::join_body(
                &plan,
                generate::waiting_abort_objects(&ctx, &plan, WaitingAbort::Aborted, e2e, false),
            ))
        }
    };
    drop(handle);
    drop(guard);
    match result {
        Ok(body) => {
            let body = match &fault {
                Some(fault) => {
                    match stream_faults::non_stream_body(fault, body, stream_faults::NATIVE).await {
                        Ok(body) => body,
                        Err(response) => return response,
                    }
                }
                None => body,
            };
            tracing::info!(parent: &span, latency_ms = started.elapsed().as_millis() as u64, "done");
            json_response(StatusCode::OK, body)
        }
        Err(err) => {
            tracing::info!(parent: &span, error = %err, "failed");
            err.into_response()
        }
    }
}

fn sse_response(body: Body) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")],
        body,
    )
        .into_response()
}

/// `/health`: 200 with an empty body ([LATEST]); in the MID profile it is `/health_generate`.
async fn health(State(state): State<AppState>) -> Response {
    if state.config().profile == Profile::Mid {
        return health_generate(State(state)).await;
    }
    empty_ok()
}

/// `/health_generate`: one greedy token from prompt `[0]`, as SGLang's health check sends.
async fn health_generate(State(state): State<AppState>) -> Response {
    let model = Arc::clone(state.model());
    let item = ItemRequest {
        input_ids: vec![0],
        params: SamplingParams {
            max_new_tokens: 1,
            temperature: 1.0,
            top_k: Some(1),
            ..SamplingParams::default()
        },
        return_logprob: false,
        logprob_start: 1,
        top_logprobs_num: 0,
        token_ids_logprob: Vec::new(),
        sample_index: 0,
        forced_output: Vec::new(),
    };
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let mut generation = Generation::new(model, item);
        generation.run_to_end();
        generation.is_finished()
    }))
    .unwrap_or(false);
    if ok {
        empty_ok()
    } else {
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    }
}

async fn ping() -> Response {
    empty_ok()
}

/// `/server_info` and `/get_server_info`: ServerArgs fields, scheduler info, `internal_states`, `version`.
async fn server_info(State(state): State<AppState>) -> Response {
    let c = state.config();
    let max_total_num_tokens = c.context_length as u64 * 16;
    let server_args = ordered! {
        "model_path": c.model_path,
        "tokenizer_path": c.model_path,
        "tokenizer_mode": "auto",
        "skip_tokenizer_init": false,
        "load_format": "auto",
        "trust_remote_code": false,
        "context_length": c.context_length,
        "is_embedding": false,
        "revision": serde_json::Value::Null,
        "model_impl": "auto",
        "host": c.host,
        "port": c.port,
        "served_model_name": c.served_model_name(),
        "weight_version": &*state.control().weight_version(),
        "dtype": "auto",
        "device": "cpu",
    };
    let scheduling = ordered! {
        "random_seed": c.seed,
        "stream_interval": c.stream_interval,
        "stream_output": c.incremental_streaming_output,
        "incremental_streaming_output": c.incremental_streaming_output,
        "max_running_requests": 4096,
        "max_total_tokens": serde_json::Value::Null,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        "schedule_policy": "fcfs",
        "tp_size": 1,
        "pp_size": 1,
        "dp_size": 1,
        "ep_size": 1,
        "nnodes": 1,
        "node_rank": 0,
        "enable_metrics": false,
        "log_level": "info",
    };
    let features = ordered! {
        "disable_radix_cache": false,
        "enable_return_hidden_states": false,
        "enable_custom_logit_processor": false,
        "allow_auto_truncate": false,
        "disaggregation_mode": "null",
        "disaggregation_bootstrap_port": 8998,
        "speculative_algorithm": serde_json::Value::Null,
        "enable_lora": serde_json::Value::Null,
        "vocab_size": c.vocab_size,
        "mock_profile": c.profile.as_str(),
        "return_original_logprob": c.return_original_logprob,
    };
    let scheduler_info = ordered! {
        "max_total_num_tokens": max_total_num_tokens,
        "max_req_input_len": c.context_length.saturating_sub(6),
        "status": "ready",
        "internal_states": json!([{
            "last_gen_throughput": 0.0,
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": max_total_num_tokens},
            "avg_spec_accept_length": null,
        }]),
        "version": SGLANG_VERSION,
    };
    // One flat object, like `{**asdict(server_args), **scheduler_info, "internal_states": ..., "version": ...}`.
    let mut body = server_args.0;
    for part in [scheduling, features, scheduler_info] {
        body.extend(part.0);
    }
    json_value(&Ordered(body))
}

/// `/model_info` and `/get_model_info`.
async fn model_info(State(state): State<AppState>) -> Response {
    let c = state.config();
    let body = match c.profile {
        Profile::Latest => ordered! {
            "model_path": c.model_path,
            "tokenizer_path": c.model_path,
            "is_generation": true,
            "preferred_sampling_params": serde_json::Value::Null,
            "weight_version": &*state.control().weight_version(),
            "has_image_understanding": false,
            "has_audio_understanding": false,
            "model_type": "qwen2",
            "architectures": json!(["Qwen2ForCausalLM"]),
        },
        Profile::Mid => ordered! {
            "model_path": c.model_path,
            "tokenizer_path": c.model_path,
            "is_generation": true,
            "preferred_sampling_params": serde_json::Value::Null,
            "weight_version": &*state.control().weight_version(),
        },
    };
    json_value(&body)
}

/// `/get_weight_version`: served in MID, a deprecation 404 in LATEST.
async fn weight_version(State(state): State<AppState>) -> Response {
    match state.config().profile {
        Profile::Mid => {
            json_value(&ordered! { "weight_version": &*state.control().weight_version() })
        }
        Profile::Latest => ApiError::Http {
            status: 404,
            message:
                "Endpoint '/get_weight_version' or '/weight_version' is deprecated. Please use \
                      '/model_info' instead."
                    .to_owned(),
        }
        .into_response(),
    }
}

pub(crate) fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn model_card(config: &ServerConfig) -> Ordered {
    ordered! {
        "id": config.served_model_name(),
        "object": "model",
        "created": unix_seconds(),
        "owned_by": "sglang",
        "root": config.served_model_name(),
        "max_model_len": config.context_length,
    }
}

/// `/v1/models`.
async fn list_models(State(state): State<AppState>) -> Response {
    json_response(
        StatusCode::OK,
        format!(
            r#"{{"object":"list","data":[{}]}}"#,
            serde_json::to_string(&model_card(state.config())).unwrap_or_default()
        )
        .into_bytes(),
    )
}

/// `/v1/models/{id}`: the card, or OpenAI's `model_not_found` 404.
async fn retrieve_model(
    State(state): State<AppState>,
    model: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    // A path that does not percent-decode to UTF-8 names no model; never answer with axum's rejection text.
    let model = model.map(|Path(m)| m).unwrap_or_default();
    if model == state.config().served_model_name() {
        return json_value(&model_card(state.config()));
    }
    let error = ordered! {
        "message": format!("The model '{model}' does not exist"),
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    };
    let body = format!(
        r#"{{"error":{}}}"#,
        serde_json::to_string(&error).unwrap_or_default()
    );
    json_response(StatusCode::NOT_FOUND, body.into_bytes())
}

/// `/get_load`: one entry per DP rank (the mock has one).
async fn get_load(State(state): State<AppState>) -> Response {
    let reqs = state.inner.running_requests.load(Ordering::Relaxed);
    let tokens = state.inner.running_tokens.load(Ordering::Relaxed);
    json_value(&[ordered! {
        "dp_rank": 0,
        "num_reqs": reqs,
        "num_waiting_reqs": state.control().waiting(),
        "num_tokens": tokens,
        "num_pending_tokens": 0,
        "ts_tic": generate::unix_now(),
    }])
}

/// `/v1/loads` [LATEST]: what slime polls to wait until the server is idle.
async fn v1_loads(State(state): State<AppState>) -> Response {
    let reqs = state.inner.running_requests.load(Ordering::Relaxed);
    let tokens = state.inner.running_tokens.load(Ordering::Relaxed);
    let max_total = u64::from(state.config().context_length) * 16;
    json_value(&ordered! {
        "timestamp": iso8601_utc(generate::unix_now()),
        "version": SGLANG_VERSION,
        "accelerator": "cpu",
        "num_accelerators": 1,
        "loads": json!([{
            "dp_rank": 0,
            "num_running_reqs": reqs,
            "num_waiting_reqs": state.control().waiting(),
            "num_total_tokens": max_total,
            "num_used_tokens": tokens,
        }]),
    })
}

/// `datetime.fromtimestamp(t, timezone.utc).isoformat()`: `2026-11-29T20:30:00.123456+00:00`.
fn iso8601_utc(unix: f64) -> String {
    let micros = (unix * 1e6).round() as i64;
    let (secs, micro) = (micros.div_euclid(1_000_000), micros.rem_euclid(1_000_000));
    let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micro:06}+00:00",
        day_secs / 3600,
        day_secs % 3600 / 60,
        day_secs % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_timestamps_are_utc_calendar_dates() {
        assert_eq!(super::iso8601_utc(0.0), "1970-01-01T00:00:00.000000+00:00");
        assert_eq!(
            super::iso8601_utc(951_782_400.5),
            "2000-02-29T00:00:00.500000+00:00"
        );
        assert_eq!(
            super::iso8601_utc(1_795_983_455.25),
            "2026-11-29T20:17:35.250000+00:00"
        );
    }
}
