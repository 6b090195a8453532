//! The RL control plane and admin endpoints: `/abort_request`, `/pause_generation`, `/continue_generation`,
//! the weight-update family, `/flush_cache`, `/admin/faults`, `/admin/stats`, `/admin/reset` and `/metrics`.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::extract::{JsonBody, RawBody, control_body, lax_bool};
use super::metrics::Gauges;
use super::respond::{json_value, ordered};
use super::state::AppState;
use crate::control::PauseMode;
use crate::error::ApiError;
use crate::faults::FaultConfig;
use mock_core::model::{Policy, PolicyError};
use mock_core::release::{FlushRefused, MetaKey};

/// `AbortReq` as the HTTP handler reads it; the other fields SGLang accepts are ignored, as its handler does.
#[derive(Deserialize)]
pub(crate) struct AbortReq {
    #[serde(default)]
    rid: Option<String>,
    #[serde(default, deserialize_with = "lax_bool")]
    abort_all: bool,
}

/// An abort as SGLang's `TokenizerManager.abort_request` makes it: `rid` (by prefix) or everything, counted
/// in `num_aborted_requests_total` when it reaches the scheduler (`abort_all`, or a rid of a request in
/// flight). SGLang (0.5.3, 0.5.9, 0.5.23) counts each abort it dispatches, not each request the abort ends.
/// Returns the items
/// hit.
fn abort(state: &AppState, rid: &str, abort_all: bool) -> usize {
    let hit = state.control().abort(rid, abort_all);
    if abort_all || hit > 0 {
        count_abort(state);
    }
    hit
}

fn count_abort(state: &AppState) {
    state
        .metrics()
        .aborted_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// `/abort_request`: 200 with an empty body, even for an unknown rid. The rid matches by prefix.
pub(crate) async fn abort_request(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<AbortReq>,
) -> Response {
    let rid = req.rid.unwrap_or_default();
    let hit = abort(&state, &rid, req.abort_all);
    tracing::info!(rid, abort_all = req.abort_all, hit, "abort_request");
    StatusCode::OK.into_response()
}

#[derive(Deserialize)]
pub(crate) struct PauseReq {
    #[serde(default)]
    mode: Option<String>,
}

/// `ContinueGenerationReqInput`: its one field is typed; a mock without a GPU has no cache to empty.
#[derive(Deserialize)]
pub(crate) struct ContinueReq {
    #[serde(default = "yes", deserialize_with = "lax_bool")]
    torch_empty_cache: bool,
}

/// `/pause_generation`. 0.5.3 reads no body: it pauses, fires an abort-all and returns. 0.5.15 and later read
/// `{"mode": "abort" | "retract" | "in_place"}` (default `abort`); abort mode then returns only once no
/// request runs, re-sending its abort-all every second (`TM: pause_generation`).
pub(crate) async fn pause_generation(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Response {
    let (mode_name, blocks) = if state.config().sglang_version.pause_modes {
        match control_body::<PauseReq>(&state, &headers, &body, "/pause_generation") {
            Ok(req) => (req.mode.unwrap_or_else(|| "abort".to_owned()), true),
            Err(err) => return err.into_response(),
        }
    } else {
        ("abort".to_owned(), false)
    };
    let Some(mode) = PauseMode::parse(&mode_name) else {
        return ApiError::Validation(format!(
            "mode: Input should be 'abort', 'retract' or 'in_place', got {mode_name:?}"
        ))
        .into_response();
    };
    let control = state.control();
    control.pause(mode);
    if mode == PauseMode::Abort {
        // `pause_generation` in abort mode calls `abort_request(abort_all=True)`.
        count_abort(&state);
        if blocks {
            control
                .wait_idle(Duration::from_secs(1), || {
                    control.abort("", true);
                })
                .await;
        }
    }
    tracing::info!(mode = mode_name, "generation paused");
    json_value(&ordered! {
        "message": "Generation paused successfully.",
        "status": "ok",
    })
}

/// `/continue_generation`: 0.5.3 reads no body; later releases read `{"torch_empty_cache": bool}`.
pub(crate) async fn continue_generation(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Response {
    if state.config().sglang_version.pause_modes {
        match control_body::<ContinueReq>(&state, &headers, &body, "/continue_generation") {
            Ok(req) => tracing::debug!(torch_empty_cache = req.torch_empty_cache, "continue"),
            Err(err) => return err.into_response(),
        }
    }
    state.control().resume();
    tracing::info!("generation continued");
    json_value(&ordered! {
        "message": "Generation continued successfully.",
        "status": "ok",
    })
}

/// The fields every weight-update request shares.
#[derive(Deserialize)]
pub(crate) struct WeightUpdate {
    #[serde(default)]
    model_path: Option<String>,
    #[serde(default, deserialize_with = "lax_bool")]
    abort_all_requests: bool,
    #[serde(default)]
    weight_version: Option<String>,
}

/// What a weight update does in the mock: optionally abort everything, hold new requests back, wait for
/// running ones to finish (unless paused), find and read the weights with `load` (a failure ends the update there,
/// with the weights and their version kept), stall for `weight_update_ms`, then switch the weights (when `load`
/// read a policy) and the version together.
async fn run_weight_update(
    state: &AppState,
    req: &WeightUpdate,
    load: impl FnOnce() -> Result<Option<Policy>, String>,
) -> Result<(), String> {
    let control = state.control();
    if req.abort_all_requests {
        abort(state, "", true);
    }
    let _update = control.begin_update();
    control.drain_running().await;
    let policy = load()?;
    let ms = state.config().weight_update_ms;
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    // The weights change whether or not the request names their version (AReaL's updates name none).
    control.weights_loaded(|weights| {
        if let Some(policy) = policy {
            state.model().set_policy(policy, weights);
        }
    });
    if let Some(version) = &req.weight_version {
        control.set_weight_version(version);
    }
    Ok(())
}

fn update_message(base: &str, req: &WeightUpdate) -> String {
    match &req.weight_version {
        Some(version) => format!("{base} Weight version updated to {version}."),
        None => base.to_owned(),
    }
}

/// `/update_weights_from_disk`: `{"success","message","num_paused_requests"}`.
pub(crate) async fn update_weights_from_disk(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<WeightUpdate>,
) -> Response {
    let Some(model_path) = req.model_path.as_deref() else {
        return ApiError::Validation("model_path: Field required".to_owned()).into_response();
    };
    if let Err(message) = run_weight_update(&state, &req, || load_weights(&state, model_path)).await
    {
        // The loader fails before any weight changes: the weights, the version and the model path stay.
        let mut response = json_value(&ordered! {
            "success": false,
            "message": message,
            "num_paused_requests": 0,
        });
        *response.status_mut() = StatusCode::BAD_REQUEST;
        return response;
    }
    state.control().set_model_path(model_path);
    json_value(&ordered! {
        "success": true,
        "message": update_message("Succeeded to update model weights.", &req),
        "num_paused_requests": 0,
    })
}

/// Where SGLang's loader finds the weights of `model_path`, as on a host without Hub access
/// (`download_weights_from_hf` in `srt/model_loader/weight_utils.py`): a local directory, or the model the
/// server loaded before (its snapshot is in the local cache). Anything else fails as `huggingface_hub` does: a
/// name that is no repo id fails its validation, and a repo id without a cached snapshot cannot be fetched.
fn find_weights(state: &AppState, model_path: &str) -> Result<(), String> {
    if std::path::Path::new(model_path).is_dir()
        || model_path == state.config().model_path
        || *model_path == *state.model_path()
    {
        return Ok(());
    }
    validate_repo_id(model_path)?;
    Err("Cannot find an appropriate cached snapshot folder for the specified revision on the local disk and \
         outgoing traffic has been disabled. To enable repo look-ups and downloads online, pass \
         'local_files_only=False' as input."
        .to_owned())
}

/// `/update_weights_from_disk`'s loader (`update_weights_from_disk` in
/// `srt/model_executor/model_runner_components/weight_updater.py`): find the weights, then read them whole. A
/// server that serves a toy policy, or a directory that holds one (MODEL.md section 14.4), has its weights read
/// and checked as SGLang's loader reads a checkpoint; any other directory holds weights the toy model has no
/// parameters for, and only the version changes. Returns the new policy, if one was read, or the whole message.
fn load_weights(state: &AppState, model_path: &str) -> Result<Option<Policy>, String> {
    find_weights(state, model_path).map_err(|e| format!("Failed to get weights iterator: {e}."))?;
    let dir = std::path::Path::new(model_path);
    let serves_policy = state.serves_policy();
    if !(serves_policy || mock_core::model::is_policy_dir(dir)) {
        return Ok(None);
    }
    let current = state.model().policy();
    match current.update_from_dir(dir) {
        Ok(policy) => Ok(Some(policy)),
        Err(e @ PolicyError::NoWeights(_)) => Err(format!("Failed to get weights iterator: {e}.")),
        Err(e) => Err(format!(
            "Failed to update weights: {e}.\nRolling back to original weights."
        )),
    }
}

/// `huggingface_hub.utils.validate_repo_id`'s checks and messages (huggingface_hub 2.4).
fn validate_repo_id(repo_id: &str) -> Result<(), String> {
    if repo_id.matches('/').count() > 1 {
        return Err(format!(
            "Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{repo_id}'. Use `repo_type` \
             argument if needed."
        ));
    }
    // `REPO_ID_REGEX`: each part is 1 to 96 of `[\w\-.]`, beginning and ending with a word character.
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let part_ok = |part: &str| {
        (1..=96).contains(&part.chars().count())
            && part.chars().all(|c| word(c) || c == '-' || c == '.')
            && part.starts_with(word)
            && part.ends_with(word)
    };
    if !repo_id.split('/').all(part_ok) {
        return Err(format!(
            "Repo id must use alphanumeric chars, '-', '_' or '.'. The name cannot start or end with '-' or '.' \
             and the maximum length is 96: '{repo_id}'."
        ));
    }
    if repo_id.contains("--") || repo_id.contains("..") {
        return Err(format!("Cannot have -- or .. in repo_id: '{repo_id}'."));
    }
    if repo_id.ends_with(".git") {
        return Err(format!("Repo_id cannot end by '.git': '{repo_id}'."));
    }
    Ok(())
}

/// `/update_weights_from_ipc` (0.5.15 and later; checkpoint-engine's path): the weights would arrive over
/// the ZMQ handles the body names, so the mock runs the update as the others do and answers
/// `"IPC weight update completed successfully"` (`update_weights_from_ipc` in
/// `srt/model_executor/model_runner_components/weight_updater.py`).
pub(crate) async fn update_weights_from_ipc(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<WeightUpdate>,
) -> Response {
    weight_update_simple(&state, &req, "IPC weight update completed successfully").await
}

/// `/begin_weight_update` and `/end_weight_update` (0.5.23): open and close a weight-update session
/// (`begin_weight_update` and `end_weight_update` in `srt/managers/scheduler_components/weight_updater.py`);
/// opening one twice, or closing none, is a 400 with the scheduler's message.
pub(crate) async fn begin_weight_update(State(state): State<AppState>) -> Response {
    session_reply(
        state.control().open_weight_update_session(),
        "a weight-update session is already open; call end_weight_update() first",
    )
}

pub(crate) async fn end_weight_update(State(state): State<AppState>) -> Response {
    session_reply(
        state.control().close_weight_update_session(),
        "no weight-update session is open; call begin_weight_update() first",
    )
}

fn session_reply(success: bool, refusal: &str) -> Response {
    let status = if success {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    };
    let mut response = json_value(&ordered! {
        "success": success,
        "message": if success { "Success" } else { refusal },
    });
    *response.status_mut() = status;
    response
}

/// `PostProcessWeightsReqInput` of slime's patch: two typed switches for quantized weights, which the toy model
/// has none of.
#[derive(Deserialize)]
pub(crate) struct PostProcessReq {
    #[serde(default)]
    restore_weights_before_load: bool,
    #[serde(default)]
    post_process_quantization: bool,
}

/// `/post_process_weights` (slime's patched 0.5.15, `--slime-patches`): the post-loading hooks run under the
/// model-update writer lock, so the call waits until no request runs (paused or not), then answers
/// `{"success": true, "message": "Success"}` (`ModelRunner.post_process_weights`).
pub(crate) async fn post_process_weights(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<PostProcessReq>,
) -> Response {
    tracing::info!(
        restore_weights_before_load = req.restore_weights_before_load,
        post_process_quantization = req.post_process_quantization,
        "post-processing weights"
    );
    state
        .control()
        .wait_idle(Duration::from_secs(1), || {})
        .await;
    json_value(&ordered! {
        "success": true,
        "message": "Success",
    })
}

/// `/update_weights_from_tensor`: `{"success","message"}`.
pub(crate) async fn update_weights_from_tensor(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<WeightUpdate>,
) -> Response {
    weight_update_simple(&state, &req, "Succeeded to update model weights.").await
}

/// `/update_weights_from_distributed`: `{"success","message"}`.
pub(crate) async fn update_weights_from_distributed(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<WeightUpdate>,
) -> Response {
    weight_update_simple(
        &state,
        &req,
        "Succeeded to update parameter online from distributed.",
    )
    .await
}

async fn weight_update_simple(state: &AppState, req: &WeightUpdate, base: &str) -> Response {
    // These routes carry the weights themselves: there is nothing to find.
    let _always_found = run_weight_update(state, req, || Ok(None)).await;
    json_value(&ordered! {
        "success": true,
        "message": update_message(base, req),
    })
}

/// `/init_weights_update_group`: accepted, nothing to connect to.
pub(crate) async fn init_weights_update_group() -> Response {
    json_value(&ordered! {
        "success": true,
        "message": "Succeeded to initialize custom process group.",
    })
}

/// `/destroy_weights_update_group`.
pub(crate) async fn destroy_weights_update_group() -> Response {
    json_value(&ordered! {
        "success": true,
        "message": "Succeeded to destroy custom process group.",
    })
}

#[derive(Deserialize)]
pub(crate) struct WeightVersionReq {
    new_version: Option<String>,
    #[serde(default = "yes", deserialize_with = "lax_bool")]
    abort_all_requests: bool,
}

fn yes() -> bool {
    true
}

/// `/update_weight_version`: `{"success":true,"message":"Weight version updated to X","new_version":"X"}`.
pub(crate) async fn update_weight_version(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<WeightVersionReq>,
) -> Response {
    let Some(version) = req.new_version else {
        return ApiError::Validation("new_version: Field required".to_owned()).into_response();
    };
    // The version first: the aborted requests' last answers report it, as SGLang's do (its scheduler reads the
    // abort one step after the version is set; `control/weight_version_abort_all` in `conform/golden/`).
    state.control().set_weight_version(&version);
    if req.abort_all_requests {
        abort(&state, "", true);
    }
    json_value(&ordered! {
        "success": true,
        "message": format!("Weight version updated to {version}"),
        "new_version": version,
    })
}

/// `/release_memory_occupation` and `/resume_memory_occupation`: 200 with `null`.
pub(crate) async fn memory_occupation() -> Response {
    json_value(&serde_json::Value::Null)
}

/// `/flush_cache`: empties the prefix cache and answers the release's text, without a content type (a
/// Starlette `Response` without a media type); refused with a 400 while requests are running or waiting.
pub(crate) async fn flush_cache(State(state): State<AppState>) -> Response {
    const FLUSHED: &str = "Cache flushed.\nPlease check backend logs for more details. (When there are running \
                           or waiting requests, the operation will not be performed.)\n";
    let control = state.control();
    let refused = control.running() + control.waiting() > 0;
    if let (false, Some(cache)) = (refused, state.prefix_cache()) {
        mock_core::engine::flush_shared(cache);
    }
    let (status, text) = match (refused, state.config().sglang_version.flush_refused) {
        (false, _) => (StatusCode::OK, FLUSHED),
        (true, FlushRefused::FlushedText) => (StatusCode::BAD_REQUEST, FLUSHED),
        (true, FlushRefused::Failed) => (StatusCode::BAD_REQUEST, "Flush cache failed.\n"),
    };
    let mut response = Response::new(axum::body::Body::from(text));
    *response.status_mut() = status;
    response
}

/// `GET /admin/faults` returns the fault configuration; `POST` replaces it atomically and returns it.
pub(crate) async fn faults(
    State(state): State<AppState>,
    method: Method,
    RawBody(body): RawBody,
) -> Response {
    if method == Method::POST {
        match FaultConfig::from_json(&body) {
            Ok(config) => state.faults().replace(config),
            Err(err) => {
                let message = match std::error::Error::source(&err) {
                    Some(source) => format!("{err}: {source}"),
                    None => err.to_string(),
                };
                return ApiError::Http {
                    status: 400,
                    message,
                }
                .into_response();
            }
        }
    }
    json_value(&serde_json::to_value(state.faults().config()).unwrap_or_default())
}

/// `POST /admin/reset`: the server as it started, for the next test. The fault schedule is the start-up one
/// with its rule counters afresh, the request and fault counters of `/admin/stats` are zero, a pause is
/// lifted and the weight version is the configured one. Requests in flight are left to finish, and the
/// Prometheus counters of `/metrics` keep counting, as a scraper expects of them. The ledger, if the server
/// keeps one, is emptied, and so is the prefix cache (a request in flight then leaves what it ends with, as a
/// request does after `/flush_cache`). The draws of unseeded samples start again at 0 (MODEL.md section 8.3), so
/// the same requests answer as they did after start-up. Answers as `/admin/stats`.
pub(crate) async fn reset(State(state): State<AppState>) -> Response {
    state.faults().reset(state.config().faults.clone());
    if let Some(ledger) = state.ledger() {
        ledger.clear();
    }
    if let Some(cache) = state.prefix_cache() {
        mock_core::engine::flush_shared(cache);
    }
    state.draws().clear();
    let control = state.control();
    control.resume();
    control.reset_weights(&state.config().weight_version);
    state
        .model()
        .restart_with(Policy::clone(state.base_policy()));
    stats(State(state)).await
}

/// `GET /admin/stats`: requests seen per endpoint, faults injected per kind, and the control plane's state.
pub(crate) async fn stats(State(state): State<AppState>) -> Response {
    let requests = state.faults().requests_seen();
    let injected = state.faults().injected();
    let control = state.control();
    json_value(&json!({
        "requests_total": requests.values().sum::<u64>(),
        "requests": requests,
        "faults_total": injected.values().sum::<u64>(),
        "faults": injected.iter().map(|(k, v)| (k.name(), *v)).collect::<std::collections::BTreeMap<_, _>>(),
        "running": control.running(),
        "waiting": control.waiting(),
        "paused": control.is_paused(),
        "weight_version": &*control.weight_version(),
    }))
}

/// `GET /metrics`: Prometheus text format.
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let (load, used_tokens) = state.load();
    let injected = state.faults().injected();
    let faults: Vec<(&'static str, u64)> = injected.iter().map(|(k, v)| (k.name(), *v)).collect();
    let body = state.metrics().render(
        state.config().served_model_name(),
        Gauges {
            running: load.running,
            queued: load.waiting,
            used_tokens,
            max_total_tokens: crate::http::info::max_total_num_tokens(state.config()),
            cache_source: match state
                .config()
                .sglang_version
                .meta_generated
                .contains(&MetaKey::CachedTokensDetails)
            {
                true => "device",
                false => "total",
            },
        },
        &faults,
    );
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}
