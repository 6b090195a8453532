//! The router: every route with its handler, the API-key middleware, and SGLang's 404 and 405 answers.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, get, on, post};

use super::respond::json_response;
use super::state::AppState;
use super::{admin, extract, faults, generate, info, loads, openai, witness};
use crate::error::ApiError;
use mock_core::ServerConfig;
use mock_core::release::{Bearer, RouteGroup, WeightVersionRoute};

/// The router with every endpoint, the API-key middleware when a key is configured, and SGLang's 404/405.
///
/// HTTP-level faults apply to every route but the generating ones (which decide their own, knowing
/// `stream`), the admin endpoints and `/metrics`.
pub(crate) fn router(state: AppState) -> Router {
    let generate_methods = MethodFilter::POST.or(MethodFilter::PUT);
    let get_or_post = MethodFilter::GET.or(MethodFilter::POST);
    let generating = Router::new()
        .route(
            "/generate",
            on(generate_methods, generate::generate_handler),
        )
        .route("/v1/completions", post(openai::completions))
        .route("/v1/chat/completions", post(openai::chat_completions))
        // An audit's batch can be far larger than a request body: it reads its own, under its own bound.
        .route("/admin/audit", post(witness::audit_samples));
    let mut unfaulted = Router::new()
        .route("/admin/faults", on(get_or_post, admin::faults))
        .route("/admin/stats", get(admin::stats))
        .route("/admin/reset", post(admin::reset))
        .route("/admin/ledger", get(witness::ledger));
    // SGLang mounts its Prometheus endpoint only with `--enable-metrics`.
    if state.config().enable_metrics {
        unfaulted = unfaulted.route("/metrics", get(admin::metrics));
    }
    // The generating handlers read their bodies themselves; every other route and the 404 read them first
    // (`read_whole_body`), so that no answer leaves a body unread.
    let whole_body = || middleware::from_fn_with_state(state.clone(), extract::read_whole_body);
    let mut app = worker_routes(state.config(), get_or_post)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            faults::http_faults,
        ))
        .layer(whole_body())
        .merge(generating)
        .merge(unfaulted.layer(whole_body()))
        .method_not_allowed_fallback(method_not_allowed);
    if state.config().api_key.is_some() || state.config().admin_api_key.is_some() {
        app = app.layer(middleware::from_fn_with_state(state.clone(), api_key_auth));
    }
    app.with_state(state)
}

/// The routes a router, a trainer or a health check calls besides generation, as each release's
/// `srt/entrypoints/http_server.py` declares them (`mock-server/VERSIONS.md` lists the differences;
/// `tests/python/route_check.py` compares this table with the wheels' route decorators).
fn worker_routes(config: &ServerConfig, get_or_post: MethodFilter) -> Router<AppState> {
    let version = config.sglang_version;
    let common = Router::new()
        .route("/health", get(info::health_generate))
        .route("/health_generate", get(info::health_generate))
        .route("/get_server_info", get(info::server_info))
        .route("/get_model_info", get(info::model_info))
        .route("/v1/models", get(info::list_models))
        .route("/v1/models/{*model}", get(info::retrieve_model));
    let mut by_release = Router::new();
    for group in version.routes {
        by_release = by_release.merge(match group {
            RouteGroup::InfoAndTokenize => Router::new()
                .route("/", get(info::root).head(info::root))
                .route("/tokenize", post(openai::tokenize::tokenize))
                .route("/v1/tokenize", post(openai::tokenize::tokenize))
                .route("/detokenize", post(openai::tokenize::detokenize))
                .route("/v1/detokenize", post(openai::tokenize::detokenize))
                .route("/server_info", get(info::server_info))
                .route("/model_info", get(info::model_info))
                .route("/v1/loads", get(loads::v1_loads))
                .route(
                    "/update_weights_from_ipc",
                    post(admin::update_weights_from_ipc),
                ),
            RouteGroup::GetLoad => Router::new().route("/get_load", get(loads::get_load)),
            RouteGroup::Ready => Router::new().route("/ready", get(info::ready)),
            RouteGroup::WeightUpdateSession => Router::new()
                .route("/begin_weight_update", post(admin::begin_weight_update))
                .route("/end_weight_update", post(admin::end_weight_update)),
        });
    }
    by_release = match version.weight_version_route {
        WeightVersionRoute::Served => {
            by_release.route("/get_weight_version", get(info::weight_version))
        }
        WeightVersionRoute::Deprecated => by_release
            .route("/get_weight_version", get(info::weight_version))
            .route("/weight_version", get(info::weight_version)),
        WeightVersionRoute::Absent => by_release,
    };
    if config.slime_patches {
        // slime's `docker/patch/v0.5.15.post1/sglang.patch`.
        by_release = by_release.route("/post_process_weights", post(admin::post_process_weights));
    }
    common
        .merge(by_release)
        .route("/flush_cache", on(get_or_post, admin::flush_cache))
        .route("/ping", get(info::ping))
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
}

/// SGLang's API-key middleware (`add_api_key_middleware` in `srt/utils/common.py`, then
/// `srt/utils/auth.py: decide_request_auth`): `OPTIONS` and the release's keyless prefixes pass; a control
/// route (the release's `admin_routes`) takes only the admin key when one is set, else the API key when one
/// is set; any other route takes the API key when one is set; the release's `bearer` says how the scheme is
/// matched. A refusal is 401 `{"error":"Unauthorized"}`.
async fn api_key_auth(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let config = state.config();
    let version = config.sglang_version;
    let path = req.uri().path();
    if req.method() == Method::OPTIONS || version.is_keyless(path) {
        return next.run(req).await;
    }
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let expected = if version.is_admin_route(path) {
        config
            .admin_api_key
            .as_deref()
            .or(config.api_key.as_deref())
    } else {
        config.api_key.as_deref()
    };
    let authorized = match expected {
        None => true,
        Some(key) => header.is_some_and(|h| bearer_matches(version.bearer, h, key)),
    };
    if authorized {
        return next.run(req).await;
    }
    // Refused before any handler reads the body: read it here (see `extract::read_whole_body`).
    let _ = axum::body::to_bytes(req.into_body(), config.max_body_bytes).await;
    ApiError::Unauthorized.into_response()
}

/// Whether an `Authorization` header carries `key`: `f"Bearer {api_key}"` exactly, or a scheme `bearer` in
/// any case, one space, then the key (`_check_bearer_token`).
fn bearer_matches(bearer: Bearer, header: &str, key: &str) -> bool {
    match bearer {
        Bearer::Exact => header.strip_prefix("Bearer ") == Some(key),
        Bearer::AnyCaseScheme => header
            .split_once(' ')
            .is_some_and(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer") && token == key),
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
