//! The router: every route with its handler, the API-key middleware, and SGLang's 404 and 405 answers.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, get, on, post};

use super::respond::json_response;
use super::state::AppState;
use super::{admin, extract, faults, generate, info, openai, witness};
use crate::config::{ServerConfig, SglangVersion};
use crate::error::ApiError;

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
    let unfaulted = Router::new()
        .route("/admin/faults", on(get_or_post, admin::faults))
        .route("/admin/stats", get(admin::stats))
        .route("/admin/reset", post(admin::reset))
        .route("/admin/ledger", get(witness::ledger))
        .route("/metrics", get(admin::metrics));
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
    let since_0_5_15 = Router::new()
        .route("/", get(info::root).head(info::root))
        .route("/tokenize", post(openai::tokenize::tokenize))
        .route("/v1/tokenize", post(openai::tokenize::tokenize))
        .route("/detokenize", post(openai::tokenize::detokenize))
        .route("/v1/detokenize", post(openai::tokenize::detokenize))
        .route("/server_info", get(info::server_info))
        .route("/model_info", get(info::model_info))
        .route("/v1/loads", get(info::v1_loads))
        .route(
            "/update_weights_from_ipc",
            post(admin::update_weights_from_ipc),
        );
    let only_0_5_23 = Router::new()
        .route("/ready", get(info::ready))
        .route("/begin_weight_update", post(admin::begin_weight_update))
        .route("/end_weight_update", post(admin::end_weight_update));
    let by_release = match version {
        SglangVersion::V0_5_3 => Router::new()
            .route("/get_weight_version", get(info::weight_version))
            .route("/get_load", get(info::get_load)),
        SglangVersion::V0_5_15 => {
            let routes = since_0_5_15
                .route("/get_weight_version", get(info::weight_version))
                .route("/weight_version", get(info::weight_version))
                .route("/get_load", get(info::get_load));
            if config.slime_patches {
                // slime's `docker/patch/v0.5.15.post1/sglang.patch`.
                routes.route("/post_process_weights", post(admin::post_process_weights))
            } else {
                routes
            }
        }
        SglangVersion::V0_5_23 => since_0_5_15.merge(only_0_5_23),
    };
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

/// The routes of the mock that 0.5.15 and later mark `@auth_level(AuthLevel.ADMIN_OPTIONAL)` in
/// `srt/entrypoints/http_server.py`, and the mock's own `/admin/*`. Every other route is `NORMAL`, as is a path
/// no route matches.
fn is_admin_route(version: SglangVersion, path: &str) -> bool {
    let since_0_5_15 = matches!(
        path,
        "/abort_request"
            | "/pause_generation"
            | "/continue_generation"
            | "/flush_cache"
            | "/update_weights_from_disk"
            | "/update_weights_from_tensor"
            | "/update_weights_from_distributed"
            | "/update_weights_from_ipc"
            | "/init_weights_update_group"
            | "/destroy_weights_update_group"
            | "/update_weight_version"
            | "/release_memory_occupation"
            | "/resume_memory_occupation"
            | "/post_process_weights"
    ) || path.starts_with("/admin/");
    match version {
        SglangVersion::V0_5_3 => false,
        SglangVersion::V0_5_15 => since_0_5_15,
        SglangVersion::V0_5_23 => {
            since_0_5_15 || matches!(path, "/begin_weight_update" | "/end_weight_update")
        }
    }
}

/// SGLang's API-key middleware. 0.5.3 (`add_api_key_middleware` in `srt/utils/common.py`): `OPTIONS`,
/// `/health*` and `/metrics*` pass, everything else needs exactly `Authorization: Bearer <api_key>`. 0.5.15
/// and later (`srt/utils/auth.py: decide_request_auth`; 0.5.23 also passes `/ready*`): a control route takes
/// only the admin key when one is set, else the API key when one is set; any other route takes the API key
/// when one is set; the scheme is matched case-insensitively. A refusal is 401 `{"error":"Unauthorized"}`.
async fn api_key_auth(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let config = state.config();
    let version = config.sglang_version;
    let path = req.uri().path();
    let exempt = path.starts_with("/health")
        || path.starts_with("/metrics")
        || (version == SglangVersion::V0_5_23 && path.starts_with("/ready"));
    if req.method() == Method::OPTIONS || exempt {
        return next.run(req).await;
    }
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let expected = if is_admin_route(version, path) {
        config
            .admin_api_key
            .as_deref()
            .or(config.api_key.as_deref())
    } else {
        config.api_key.as_deref()
    };
    let authorized = match expected {
        None => true,
        Some(key) => header.is_some_and(|h| bearer_matches(version, h, key)),
    };
    if authorized {
        return next.run(req).await;
    }
    // Refused before any handler reads the body: read it here (see `extract::read_whole_body`).
    let _ = axum::body::to_bytes(req.into_body(), config.max_body_bytes).await;
    ApiError::Unauthorized.into_response()
}

/// Whether an `Authorization` header carries `key`: `f"Bearer {api_key}"` exactly in 0.5.3; a scheme
/// `bearer` in any case, one space, then the key, from 0.5.15 (`_check_bearer_token`).
fn bearer_matches(version: SglangVersion, header: &str, key: &str) -> bool {
    match version {
        SglangVersion::V0_5_3 => header.strip_prefix("Bearer ") == Some(key),
        SglangVersion::V0_5_15 | SglangVersion::V0_5_23 => header
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
