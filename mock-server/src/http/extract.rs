//! Extractors for the handlers: the request body under the server's size limit, a JSON body read as FastAPI
//! reads it, and the connection a fault can reset. Every rejection is an [`ApiError`] in SGLang's shape,
//! never axum's default rejection text.

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::conn::ConnHandle;
use super::error::PendingFrame;
use super::state::AppState;
use crate::error::ApiError;
use mock_core::ValidationErrors;
use mock_core::request::{bytes_repr, control_errors, json_decode_error, py_repr};

/// The whole request body, refused beyond `--max-body-bytes` with a 413 in SGLang's HTTPException shape.
#[derive(Debug)]
pub(crate) struct RawBody(pub Bytes);

impl FromRequest<AppState> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        read_limited(req.into_body(), state.config().max_body_bytes)
            .await
            .map(RawBody)
    }
}

/// A body read to its end, refused beyond `limit` bytes with a 413.
pub(crate) async fn read_limited(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Ok(bytes),
        Err(err) if is_length_limit(&err) => Err(ApiError::Http {
            status: 413,
            message: format!("Request body is larger than the limit of {limit} bytes."),
        }),
        Err(err) => Err(ApiError::Validation(format!(
            "Could not read the request body: {err}"
        ))),
    }
}

/// The outermost layer: every request body is read to its end before anything answers, as uvicorn reads past
/// a body that a handler ignores and keeps the connection. hyper closes a connection whose request body was
/// left unread (a 401, a 404, a handler that takes no body), and a client that reuses the connection meets a
/// reset. The handlers then read the buffered body without another copy.
pub(crate) async fn read_whole_body(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let (parts, body) = req.into_parts();
    // Cheap to keep: the method is a small value and the URI shares its bytes.
    let (method, uri) = (parts.method.clone(), parts.uri.clone());
    let mut response = match read_limited(body, state.config().max_body_bytes).await {
        Ok(bytes) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(err) => err.into_response(),
    };
    if let Some(PendingFrame(errors)) = response.extensions_mut().remove::<PendingFrame>()
        && let Some(frame) = endpoint_frame(&state, &method, uri.path())
    {
        *response.body_mut() = Body::from(ApiError::pydantic_body(&errors, Some(&frame)));
    }
    response
}

/// The frame FastAPI adds to a validation error (`_extract_endpoint_context`): the handler's source file and the
/// line of its first decorator, its name, and the request's method with the route; `None` for a route whose
/// errors the server does not write as FastAPI's.
pub(crate) fn endpoint_frame(state: &AppState, method: &Method, path: &str) -> Option<String> {
    let (route, function, line) = state
        .config()
        .sglang_version
        .validation_endpoints
        .iter()
        .find(|(route, _, _)| *route == path)?;
    // `/v1/loads` is the one route of these releases whose handler has a module of its own.
    let file = match *route {
        "/v1/loads" => "v1_loads.py",
        _ => "http_server.py",
    };
    Some(format!(
        "\n  File \"{ENDPOINT_DIR}{file}\", line {line}, in {function}\n    {method} {route}"
    ))
}

/// The response of a generating route's error (those routes run without [`read_whole_body`]): a validation
/// error with the endpoint's frame, any other as it is.
pub(crate) fn error_response(
    err: ApiError,
    state: &AppState,
    method: &Method,
    path: &str,
) -> Response {
    let ApiError::Pydantic(errors) = err else {
        return err.into_response();
    };
    let frame = endpoint_frame(state, method, path);
    let body = ApiError::pydantic_body(&errors, frame.as_deref());
    (
        axum::http::StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Where the releases' handlers live in SGLang's Docker images (`lmsysorg/sglang`, an editable install under
/// `/sgl-workspace/sglang`): the directory of the file a validation error's frame names. A pip install names
/// its site-packages instead; `conform` compares frames without the directory.
pub(crate) const ENDPOINT_DIR: &str = "/sgl-workspace/sglang/python/sglang/srt/entrypoints/";

/// Whether a body error is `to_bytes`' limit being reached (rather than the connection failing).
fn is_length_limit(err: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(error) = source {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// A JSON body read into `T` as FastAPI reads a Pydantic model: an empty body is `{}`, and the wrong shape
/// is a 400 `RequestValidationError`, with Pydantic's errors where the release's model of the route is known
/// ([`control_body`]).
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let route = req.uri().path().to_owned();
        let headers = req.headers().clone();
        let RawBody(body) = RawBody::from_request(req, state).await?;
        control_body(state, &headers, &body, &route).map(JsonBody)
    }
}

/// A control route's body: FastAPI's validation against the release's model of the route first (Pydantic's
/// errors, `request::control_errors`), then `T` as the server reads it.
pub(crate) fn control_body<T: DeserializeOwned>(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
    route: &str,
) -> Result<T, ApiError> {
    let version = state.config().sglang_version;
    if read_as_bytes(headers)
        && !body.is_empty()
        && let Some(err) = bytes_body_error(body, |json| control_errors(json, version, route))
    {
        return Err(err);
    }
    if let Some(errors) = control_errors(body, version, route) {
        return Err(ApiError::Pydantic(errors));
    }
    // A body that is not JSON, on a route whose model FastAPI reads: its decoder's words.
    if version
        .control_models
        .iter()
        .any(|(path, _, _)| *path == route)
        && !body.iter().all(u8::is_ascii_whitespace)
        && let Err(err) = serde_json::from_slice::<serde::de::IgnoredAny>(body)
    {
        return Err(ApiError::Pydantic(json_decode_error(
            body,
            &err,
            version.json_decoder,
        )));
    }
    parse_body(body)
}

/// A `bool` field of a control body as Pydantic's lax mode reads it (`"yes"`, `1`, `"true"`, ...; the running
/// 0.5.23 answers `{"abort_all": "yes"}` as an abort of everything): `#[serde(deserialize_with = "lax_bool")]`.
/// A value the model refuses has had its Pydantic errors already ([`control_body`]); one whose release holds no
/// model of the route is serde's error.
pub(crate) fn lax_bool<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<bool, D::Error> {
    let value = serde_json::Value::deserialize(deserializer)?;
    mock_core::request::pydantic_bool(&value).ok_or_else(|| {
        serde::de::Error::custom(format!("invalid value: {value}, expected a boolean"))
    })
}

/// A body read as [`JsonBody`] reads it, for a handler that decides first whether to read it at all.
pub(crate) fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|err| ApiError::Validation(format!("{err}")))
}

/// The JSON body of an OpenAI-layer route: SGLang's `validate_json_request` first (only `application/json`),
/// then the body as a JSON value, refused with FastAPI's decode message.
#[derive(Debug)]
pub(crate) struct OpenAiJson(pub serde_json::Value);

impl FromRequest<AppState> for OpenAiJson {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        check_content_type(req.headers())?;
        let RawBody(body) = RawBody::from_request(req, state).await?;
        serde_json::from_slice(&body)
            .map(OpenAiJson)
            .map_err(|err| {
                let decoder = state.config().sglang_version.json_decoder;
                ApiError::Pydantic(json_decode_error(&body, &err, decoder))
            })
    }
}

/// `validate_json_request`: the OpenAI routes take `application/json` only.
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    if media_type == "application/json" {
        Ok(())
    } else {
        // A `RequestValidationError` raised with an error dict of SGLang's own, written as the handler writes
        // any (`str(exc)`, then `str(exc.errors())`); raised in a dependency, it has no endpoint frame.
        let errors = ValidationErrors(vec![MEDIA_TYPE_ERROR.to_owned()]);
        Err(ApiError::Validation(errors.message(None)))
    }
}

/// `validate_json_request`'s error, as Python prints the dict it raises.
const MEDIA_TYPE_ERROR: &str = "{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: Only \
     'application/json' is allowed\", 'type': 'value_error'}";

/// Whether FastAPI reads a non-empty body as its bytes rather than as JSON (`get_request_handler`): a body sent
/// with a content type that is neither `application/json` nor `application/*+json` (one that does not parse is
/// `text/plain` to Python's `email.message`); without a content type a body is JSON.
pub(crate) fn read_as_bytes(headers: &HeaderMap) -> bool {
    let Some(content_type) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    let json = match media_type.split_once('/') {
        Some((main, subtype)) if main.eq_ignore_ascii_case("application") => {
            subtype.eq_ignore_ascii_case("json")
                || subtype
                    .len()
                    .checked_sub(5)
                    .and_then(|at| subtype.get(at..))
                    .is_some_and(|end| end.eq_ignore_ascii_case("+json"))
        }
        Some(_) | None => false,
    };
    !json
}

/// The refusal of a body FastAPI read as bytes: the route's model refuses it as it refuses the same text sent
/// as a JSON string (`errors_for`, given that JSON), with the bytes as each error's input. `None` when the
/// route has no model to refuse it.
pub(crate) fn bytes_body_error(
    body: &[u8],
    errors_for: impl FnOnce(&[u8]) -> Option<ValidationErrors>,
) -> Option<ApiError> {
    let text = serde_json::Value::String(String::from_utf8_lossy(body).into_owned());
    let as_json = serde_json::to_vec(&text).unwrap_or_default();
    let ValidationErrors(errors) = errors_for(&as_json)?;
    let from = format!("'input': {}", py_repr(&text));
    let to = format!("'input': {}", bytes_repr(body));
    Some(ApiError::Pydantic(ValidationErrors(
        errors.into_iter().map(|e| e.replace(&from, &to)).collect(),
    )))
}

/// The connection the request came on, when it came over [`crate::run`]'s listener (not in process).
#[derive(Debug)]
pub(crate) struct Conn(pub Option<ConnHandle>);

impl<S: Send + Sync> FromRequestParts<S> for Conn {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Conn(
            parts
                .extensions
                .get::<ConnectInfo<ConnHandle>>()
                .map(|info| info.0.clone()),
        ))
    }
}
