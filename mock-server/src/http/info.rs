//! The worker endpoints routers and clients read: health, server and model info, models, weight version, load.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::drive::unix_now;
use super::respond::{Ordered, empty_ok, json_response, json_value, ordered};
use super::state::AppState;
use crate::error::ApiError;
use mock_core::ServerConfig;
use mock_core::engine::{Generation, ItemRequest, SamplingParams};
use mock_core::release::ModelInfoKey;

/// `/ready` (0.5.23): 200 with an empty body, 503 while paused (`ready` in `srt/entrypoints/http_server.py`,
/// `TokenizerManager.is_ready`).
pub(crate) async fn ready(State(state): State<AppState>) -> Response {
    if state.control().is_paused() {
        let mut response = empty_ok();
        *response.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
        return response;
    }
    empty_ok()
}

/// `GET /` and `HEAD /` (0.5.15 and later, `sglang_root`): the JSON string `"SGLang is running"`.
pub(crate) async fn root() -> Response {
    json_value(&serde_json::Value::from("SGLang is running"))
}

/// `/health` and `/health_generate`: one greedy token from prompt `[0]`, as SGLang's health check sends (both
/// paths are one handler in every release; 0.5.15 and later skip the generation only when
/// `SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION` is false).
pub(crate) async fn health_generate(State(state): State<AppState>) -> Response {
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
        draw: 0,
        forced_output: Vec::new(),
        sampling_mask: None,
        top_p_token_ids: false,
        routes_from: None,
        stream_interval: None,
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

pub(crate) async fn ping() -> Response {
    empty_ok()
}

/// The KV pool's size: `--max-total-tokens`.
pub(crate) fn max_total_num_tokens(config: &ServerConfig) -> usize {
    usize::try_from(config.kv_pool_tokens()).unwrap_or(usize::MAX)
}

/// `/server_info` and `/get_server_info`: the release's own answer ([`SglangVersion::server_info`]: every
/// `ServerArgs` field, the scheduler's info, `internal_states[]`, `version`, in the release's order) with the
/// values the mock's flags, pool and release decide written over it ([`live_value`]). The rest are the values the
/// release resolved for the reference launch (`scripts/real_sglang.py`: the tiny Qwen3 on the CPU), which the mock
/// has no flag for.
///
/// [`SglangVersion::server_info`]: mock_core::SglangVersion::server_info
pub(crate) async fn server_info(State(state): State<AppState>) -> Response {
    let template = state.config().sglang_version.server_info();
    json_value(&overlay(&state, template))
}

/// A recorded object of `/server_info` (the top, or one scheduler's `internal_states[]` entry, its copy of the
/// arguments and its memory figures) with the mock's values: each scheduler's entry in turn, its pool as
/// `memory_usage.token_capacity`, zero start-up timings (the mock's start-up takes no such time), and every other
/// field the mock decides ([`live_value`]) or the release's.
fn overlay(state: &AppState, recorded: &serde_json::Map<String, Value>) -> Value {
    let fields = recorded.iter().map(|(key, recorded)| {
        let value = match (key.as_str(), recorded) {
            ("internal_states", Value::Array(schedulers)) => Value::Array(
                schedulers
                    .iter()
                    .map(|scheduler| {
                        scheduler
                            .as_object()
                            .map_or_else(|| scheduler.clone(), |entry| overlay(state, entry))
                    })
                    .collect(),
            ),
            ("memory_usage", Value::Object(usage)) => {
                let mut usage = usage.clone();
                usage.insert(
                    "token_capacity".to_owned(),
                    json!(max_total_num_tokens(state.config())),
                );
                Value::Object(usage)
            }
            ("startup_time", _) => zeroed(recorded),
            _ => live_value(state, key).unwrap_or_else(|| recorded.clone()),
        };
        (key.clone(), value)
    });
    Value::Object(fields.collect())
}

/// The value of a `/server_info` field that the mock decides: a flag's, as `ServerArgs` holds it (`null` for an
/// unset optional flag, as the release reports it), the pool's, the release's own, or none (`None`: the release's
/// recorded value stands).
fn live_value(state: &AppState, key: &str) -> Option<Value> {
    let c = state.config();
    Some(match key {
        "model_path" => json!(c.model_path),
        "tokenizer_path" => json!(c.tokenizer_path()),
        "served_model_name" => json!(c.served_model_name()),
        "load_format" => json!(c.load_format),
        "context_length" => json!(c.context_length),
        "host" => json!(c.host),
        "port" => json!(c.port),
        "random_seed" => json!(c.seed),
        "weight_version" => json!(&*state.control().weight_version()),
        // The release echoes its keys (`dataclasses.asdict`); the mock does not hand them to whoever reads this.
        "api_key" | "admin_api_key" => Value::Null,
        "max_running_requests" => json!(c.max_running_requests),
        "max_queued_requests" => json!(c.max_queued_requests),
        "max_total_tokens" => json!(c.max_total_tokens),
        "chunked_prefill_size" => json!(c.chunked_prefill_size),
        "max_prefill_tokens" => json!(c.max_prefill_tokens),
        "schedule_policy" => json!(c.schedule_policy),
        "schedule_conservativeness" => json!(c.schedule_conservativeness),
        "page_size" => json!(c.page_size),
        "disable_radix_cache" => json!(c.disable_radix_cache),
        "enable_cache_report" => json!(c.enable_cache_report),
        "stream_interval" => json!(c.stream_interval),
        // 0.5.3 names the flag `stream_output`.
        "stream_output" | "incremental_streaming_output" => json!(c.incremental_streaming_output),
        "enable_metrics" => json!(c.enable_metrics),
        "enable_deterministic_inference" => json!(c.enable_deterministic_inference),
        "enable_return_routed_experts" => json!(c.enable_return_routed_experts),
        "sampling_mask_max_tokens" => json!(c.sampling_mask_max_tokens),
        // The toy model has no grammar: a constrained request is refused as such a server refuses it.
        "grammar_backend" => json!("none"),
        // 0.5.23: what the server was asked for, its command line without the program.
        "launch_command" => json!(std::env::args().skip(1).collect::<Vec<_>>().join(" ")),
        "max_total_num_tokens" => json!(max_total_num_tokens(c)),
        "max_req_input_len" => json!(c.context_len().saturating_sub(6)),
        "effective_max_running_requests_per_dp" => json!(c.max_running_requests?),
        "version" => json!(c.sglang_version.as_str()),
        _ => return None,
    })
}

/// `value` with every number 0.0: its shape without the release's timings.
fn zeroed(value: &Value) -> Value {
    match value {
        Value::Number(_) => json!(0.0),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, value)| (key.clone(), zeroed(value)))
                .collect(),
        ),
        Value::Array(values) => Value::Array(values.iter().map(zeroed).collect()),
        Value::Null | Value::Bool(_) | Value::String(_) => value.clone(),
    }
}

/// `/model_info` and `/get_model_info`: `model_info` in each release's `srt/entrypoints/http_server.py` (0.5.3
/// has only `get_model_info`, with its first five keys).
pub(crate) async fn model_info(State(state): State<AppState>) -> Response {
    let c = state.config();
    let weight_version = state.control().weight_version();
    // A weight update from disk changes these two; the tokenizer stays (`TM: _update_model_path_info`).
    let (model_path, served_model_name) = (state.model_path(), state.served_model_name());
    let body = Ordered(
        c.sglang_version
            .model_info
            .iter()
            .map(|key| match key {
                ModelInfoKey::ModelPath => ("model_path", json!(&*model_path)),
                ModelInfoKey::ServedModelName => ("served_model_name", json!(&*served_model_name)),
                ModelInfoKey::TokenizerPath => ("tokenizer_path", json!(c.tokenizer_path())),
                ModelInfoKey::IsGeneration => ("is_generation", json!(true)),
                ModelInfoKey::PreferredSamplingParams => ("preferred_sampling_params", Value::Null),
                ModelInfoKey::WeightVersion => ("weight_version", json!(&*weight_version)),
                ModelInfoKey::LoadFormat => ("load_format", json!(c.load_format)),
                ModelInfoKey::ReasoningParser => ("reasoning_parser", Value::Null),
                ModelInfoKey::ToolCallParser => ("tool_call_parser", Value::Null),
                ModelInfoKey::DisaggregationMode => ("disaggregation_mode", json!("null")),
                ModelInfoKey::HasImageUnderstanding => ("has_image_understanding", json!(false)),
                ModelInfoKey::HasAudioUnderstanding => ("has_audio_understanding", json!(false)),
                ModelInfoKey::ModelType => ("model_type", json!(state.model_card().0)),
                ModelInfoKey::Architectures => ("architectures", json!(state.model_card().1)),
                ModelInfoKey::Embedding => ("embedding", embedding(c)),
            })
            .collect::<Vec<_>>(),
    );
    let mut body = body;
    if state.serves_policy() {
        // A toy policy's weights (MODEL.md section 14.4), which no release reports: which weights serve now, and
        // how many updates have replaced them, the count the ledger keeps with every token's span.
        let policy = state.model().policy();
        body.0.push((
            "policy",
            json!({
                "num_buckets": policy.buckets(),
                "digest": mock_core::model::digest(&policy),
                "weight_updates": state.control().weights(),
            }),
        ));
    }
    json_value(&body)
}

/// 0.5.23's `embedding` object of `/model_info` (`resolved_embedding_plan` in `srt/configs/embedding_model_spec.py`):
/// the release's for a causal LM, which serves no embeddings, with the caches the mock's flags disable.
fn embedding(c: &ServerConfig) -> Value {
    let mut plan = c
        .sglang_version
        .model_info_embedding()
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(cache) = plan.get_mut("cache").and_then(Value::as_object_mut) {
        cache.insert(
            "radix_cache_disabled".to_owned(),
            json!(c.disable_radix_cache),
        );
        cache.insert(
            "chunked_prefill_disabled".to_owned(),
            json!(c.chunked_prefill_size == -1),
        );
    }
    plan
}

/// `/get_weight_version` (0.5.3 and 0.5.15; 0.5.23 has no such route): served by 0.5.3 and by slime's
/// patched 0.5.15 (`weight_version` in `docker/patch/v0.5.15.post1/sglang.patch`), a deprecation 404 in 0.5.15.
pub(crate) async fn weight_version(State(state): State<AppState>) -> Response {
    let c = state.config();
    // A release without the route never routes here; were it to, the 404 is the nearest answer.
    if c.serves_weight_version() {
        return json_value(&ordered! { "weight_version": &*state.control().weight_version() });
    }
    ApiError::Http {
        status: 404,
        message: "Endpoint '/get_weight_version' or '/weight_version' is deprecated. Please use \
                  '/model_info' instead."
            .to_owned(),
    }
    .into_response()
}

pub(crate) fn unix_seconds() -> u64 {
    unix_now() as u64
}

/// `ModelCard` of `srt/entrypoints/openai/protocol.py`, with `parent` where the release has it.
fn model_card(state: &AppState) -> Ordered {
    let name = state.served_model_name();
    let mut card = ordered! {
        "id": &*name,
        "object": "model",
        "created": unix_seconds(),
        "owned_by": "sglang",
        "root": &*name,
    };
    if state.config().sglang_version.model_card_parent {
        card.0.push(("parent", serde_json::Value::Null));
    }
    card.0.push((
        "max_model_len",
        serde_json::json!(state.config().context_len()),
    ));
    card
}

/// `/v1/models`.
pub(crate) async fn list_models(State(state): State<AppState>) -> Response {
    json_response(
        StatusCode::OK,
        format!(
            r#"{{"object":"list","data":[{}]}}"#,
            serde_json::to_string(&model_card(&state)).unwrap_or_default()
        )
        .into_bytes(),
    )
}

/// `/v1/models/{id}`: the card, or OpenAI's `model_not_found` 404.
pub(crate) async fn retrieve_model(
    State(state): State<AppState>,
    model: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    // A path that does not percent-decode to UTF-8 names no model; never answer with axum's rejection text.
    let model = model.map(|Path(m)| m).unwrap_or_default();
    if *model == *state.served_model_name() {
        return json_value(&model_card(&state));
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

/// `datetime.fromtimestamp(t, timezone.utc).isoformat()`: `2026-11-29T20:30:00.123456+00:00`.
pub(crate) fn iso8601_utc(unix: f64) -> String {
    // Only a clock past the year 9999 is out of range.
    let ts = jiff::Timestamp::from_microsecond((unix * 1e6).round() as i64)
        .unwrap_or(jiff::Timestamp::MAX);
    ts.strftime("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()
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
