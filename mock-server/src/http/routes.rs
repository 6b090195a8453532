//! The router: every route with its handler, the API-key middleware, and SGLang's 404 and 405 answers.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, any, get, on, post};

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
        .slashed(
            "/generate",
            on(generate_methods, generate::generate_handler),
        )
        .slashed("/v1/completions", post(openai::completions))
        .slashed("/v1/chat/completions", post(openai::chat_completions))
        // An audit's batch can be far larger than a request body: it reads its own, under its own bound.
        .slashed("/admin/audit", post(witness::audit_samples));
    let mut unfaulted = Router::new()
        .slashed("/admin/faults", on(get_or_post, admin::faults))
        .slashed("/admin/stats", get(admin::stats))
        .slashed("/admin/reset", post(admin::reset))
        .slashed("/admin/ledger", get(witness::ledger));
    // SGLang mounts its Prometheus endpoint only with `--enable-metrics`.
    if state.config().enable_metrics {
        unfaulted = unfaulted.slashed("/metrics", get(admin::metrics));
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

/// Starlette's `redirect_slashes`, on by default in FastAPI: a path that matches no route but does without its
/// trailing slash answers `307 Temporary Redirect` to that path, whatever the method (`Router.app` in
/// `starlette/routing.py`). Each static route is registered with its slashed twin, so that no second table of
/// paths can fall out of step with the routes.
trait Slashed {
    fn slashed(self, path: &'static str, method_router: MethodRouter<AppState>) -> Self;
}

impl Slashed for Router<AppState> {
    fn slashed(self, path: &'static str, method_router: MethodRouter<AppState>) -> Self {
        // Starlette strips every trailing slash (`rstrip("/")`): `path/`, and `path/{*rest}` for `path//`, ...;
        // a rest that is not all slashes is a path of its own, and no route's.
        let redirect = move |state: State<AppState>, req: Request| async move {
            if req.uri().path().trim_end_matches('/') == path {
                redirect_without_slash(state, req).await
            } else {
                let _ = axum::body::to_bytes(req.into_body(), state.config().max_body_bytes).await;
                not_found().await
            }
        };
        self.route(path, method_router)
            .route(&format!("{path}/"), any(redirect))
            .route(&format!("{path}/{{*rest}}"), any(redirect))
    }
}

/// The redirect of `Slashed`: an empty body and `location` the URL without the slash (the `Host` header's
/// authority, the path and the query), as `RedirectResponse` writes it. The body is read first, as every answer
/// does (`extract::read_whole_body`).
async fn redirect_without_slash(State(state): State<AppState>, req: Request) -> Response {
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let query = req
        .uri()
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let location = match req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
    {
        Some(host) => format!("http://{host}{path}{query}"),
        None => format!("{path}{query}"),
    };
    let _ = axum::body::to_bytes(req.into_body(), state.config().max_body_bytes).await;
    let mut response = StatusCode::TEMPORARY_REDIRECT.into_response();
    if let Ok(value) = header::HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response.headers_mut().insert(
        header::CONTENT_LENGTH,
        header::HeaderValue::from_static("0"),
    );
    response
}

/// The routes a router, a trainer or a health check calls besides generation, as each release's
/// `srt/entrypoints/http_server.py` declares them (`mock-server/VERSIONS.md` lists the differences;
/// `tests/python/route_check.py` compares this table with the wheels' route decorators).
fn worker_routes(config: &ServerConfig, get_or_post: MethodFilter) -> Router<AppState> {
    let version = config.sglang_version;
    let common = Router::new()
        .slashed("/health", get(info::health_generate))
        .slashed("/health_generate", get(info::health_generate))
        .slashed("/get_server_info", get(info::server_info))
        .slashed("/get_model_info", get(info::model_info))
        .route("/v1/models", get(info::list_models))
        // `/v1/models/{model}` with an empty name too: the release looks the empty name up.
        .route("/v1/models/", get(info::retrieve_model))
        .route("/v1/models/{*model}", get(info::retrieve_model));
    let mut by_release = Router::new();
    for group in version.routes {
        by_release = by_release.merge(match group {
            RouteGroup::InfoAndTokenize => Router::new()
                .route("/", get(info::root).head(info::root))
                .slashed("/tokenize", post(openai::tokenize::tokenize))
                .slashed("/v1/tokenize", post(openai::tokenize::tokenize))
                .slashed("/detokenize", post(openai::tokenize::detokenize))
                .slashed("/v1/detokenize", post(openai::tokenize::detokenize))
                .slashed("/server_info", get(info::server_info))
                .slashed("/model_info", get(info::model_info))
                .slashed("/v1/loads", get(loads::v1_loads))
                .slashed(
                    "/update_weights_from_ipc",
                    post(admin::update_weights_from_ipc),
                ),
            RouteGroup::GetLoad => Router::new().slashed("/get_load", get(loads::get_load)),
            RouteGroup::Ready => Router::new().slashed("/ready", get(info::ready)),
            RouteGroup::WeightUpdateSession => Router::new()
                .slashed("/begin_weight_update", post(admin::begin_weight_update))
                .slashed("/end_weight_update", post(admin::end_weight_update)),
        });
    }
    by_release = match version.weight_version_route {
        WeightVersionRoute::Served => {
            by_release.slashed("/get_weight_version", get(info::weight_version))
        }
        WeightVersionRoute::Deprecated => by_release
            .slashed("/get_weight_version", get(info::weight_version))
            .slashed("/weight_version", get(info::weight_version)),
        WeightVersionRoute::Absent => by_release,
    };
    if config.slime_patches {
        // slime's `docker/patch/v0.5.15.post1/sglang.patch`.
        by_release = by_release.slashed("/post_process_weights", post(admin::post_process_weights));
    }
    common
        .merge(by_release)
        .slashed("/flush_cache", on(get_or_post, admin::flush_cache))
        .slashed("/ping", get(info::ping))
        .slashed("/abort_request", post(admin::abort_request))
        .slashed("/pause_generation", post(admin::pause_generation))
        .slashed("/continue_generation", post(admin::continue_generation))
        .slashed(
            "/update_weights_from_disk",
            post(admin::update_weights_from_disk),
        )
        .slashed(
            "/update_weights_from_tensor",
            post(admin::update_weights_from_tensor),
        )
        .slashed(
            "/update_weights_from_distributed",
            post(admin::update_weights_from_distributed),
        )
        .slashed(
            "/init_weights_update_group",
            post(admin::init_weights_update_group),
        )
        .slashed(
            "/destroy_weights_update_group",
            post(admin::destroy_weights_update_group),
        )
        .slashed("/update_weight_version", post(admin::update_weight_version))
        .slashed(
            "/release_memory_occupation",
            on(get_or_post, admin::memory_occupation),
        )
        .slashed(
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
