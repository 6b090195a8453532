//! The server's error, in SGLang's error shapes: the HTTP layer (`http::error`) answers with it. What the core
//! refuses (a [`RequestError`]: parsing, validation, the engine) becomes one here, at the edge; the HTTP layer
//! adds its own (a 413, a 401, an `HTTPException`, the OpenAI layer's errors).

use std::borrow::Cow;

use mock_core::{RequestError, ValidationErrors};
use serde::Serialize;

use mock_core::release::SglangVersion;
use mock_core::wire;

/// Everything that can go wrong while answering a request, each variant in the shape SGLang uses for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// A Python `ValueError` on a native endpoint (`_create_error_response`):
    /// HTTP 400 with `{"error":{"message":...}}`; inside a stream an `{"error":...}` event.
    #[error("{0}")]
    Value(String),
    /// A `RequestValidationError` raised with a message of SGLang's own (an unsupported media type): HTTP 400
    /// with `{"object":"error","message":...,"type":"Bad Request","param":null,"code":400}`.
    #[error("{0}")]
    Validation(String),
    /// FastAPI's own `RequestValidationError`, Pydantic's errors for a body: the same shape, its message written
    /// by [`ValidationErrors::message`] with the endpoint's frame where the HTTP layer knows the endpoint
    /// (`http::extract::read_whole_body`).
    #[error("{0}")]
    Pydantic(ValidationErrors),
    /// A FastAPI `HTTPException`: `{"object":"error","message":...,"type":"<status>","param":null,"code":<status>}`.
    #[error("HTTP {status}: {message}")]
    Http { status: u16, message: String },
    /// An uncaught Python exception (e.g. the `TypeError` of an unknown sampling parameter):
    /// HTTP 500 with the plain-text body `Internal Server Error`. The detail is only logged.
    #[error("internal server error: {0}")]
    Internal(String),
    /// A `ValueError` of the OpenAI layer (`create_error_response`): HTTP 400 with
    /// `{"object":"error","message":...,"type":"BadRequestError","param":null,"code":400}`.
    #[error("{0}")]
    OpenAiBadRequest(String),
    /// An error of the OpenAI layer with its own type and status (`create_error_response(message, err_type,
    /// status_code)`), e.g. detokenization's `InternalServerError` 500.
    #[error("{message}")]
    OpenAi {
        status: u16,
        err_type: &'static str,
        message: String,
    },
    /// A violation of 0.5.23's JSON contract (`api_contract.generate_contract_error`): HTTP 400 with
    /// `{"error": <the decoder's text>}`, for a stream too.
    #[error("{0}")]
    Contract(String),
    /// The API-key middleware: HTTP 401 with `{"error":"Unauthorized"}`.
    #[error("unauthorized")]
    Unauthorized,
}

/// Each kind the core raises is answered as SGLang's HTTP layer answers it.
impl From<RequestError> for ApiError {
    fn from(err: RequestError) -> ApiError {
        match err {
            RequestError::Value(message) => ApiError::Value(message),
            RequestError::Validation(errors) => ApiError::Pydantic(errors),
            RequestError::Contract(message) => ApiError::Contract(message),
            RequestError::Internal(detail) => ApiError::Internal(detail),
        }
    }
}

impl ApiError {
    pub fn value(message: impl Into<String>) -> Self {
        ApiError::Value(message.into())
    }

    pub fn openai_bad_request(message: impl Into<String>) -> Self {
        ApiError::OpenAiBadRequest(message.into())
    }

    pub fn internal(detail: impl Into<String>) -> Self {
        ApiError::Internal(detail.into())
    }

    /// The HTTP status this error is answered with outside a stream.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::Value(_)
            | ApiError::Validation(_)
            | ApiError::Pydantic(_)
            | ApiError::OpenAiBadRequest(_)
            | ApiError::Contract(_) => 400,
            ApiError::Http { status, .. } | ApiError::OpenAi { status, .. } => *status,
            ApiError::Internal(_) => 500,
            ApiError::Unauthorized => 401,
        }
    }

    /// The JSON body of FastAPI's validation error with the endpoint's `frame` (`None`: FastAPI knows no
    /// endpoint).
    pub fn pydantic_body(errors: &ValidationErrors, frame: Option<&str>) -> Vec<u8> {
        let message = errors.message(frame);
        // Serialising a struct of strings and integers cannot fail.
        serde_json::to_vec(&ErrorResponse {
            object: "error",
            message: &message,
            r#type: "Bad Request",
            param: None,
            code: 400,
        })
        .unwrap_or_default()
    }

    /// The JSON body of the error, or `None` for the plain-text 500.
    pub fn json_body(&self) -> Option<Vec<u8>> {
        let body = match self {
            ApiError::Pydantic(errors) => return Some(ApiError::pydantic_body(errors, None)),
            ApiError::Value(message) => serde_json::to_vec(&ValueErrorBody {
                error: MessageOnly { message },
            }),
            ApiError::Validation(message) => serde_json::to_vec(&ErrorResponse {
                object: "error",
                message,
                r#type: "Bad Request",
                param: None,
                code: 400,
            }),
            ApiError::OpenAiBadRequest(message) => serde_json::to_vec(&ErrorResponse {
                object: "error",
                message,
                r#type: "BadRequestError",
                param: None,
                code: 400,
            }),
            ApiError::OpenAi {
                status,
                err_type,
                message,
            } => serde_json::to_vec(&ErrorResponse {
                object: "error",
                message,
                r#type: err_type,
                param: None,
                code: *status,
            }),
            ApiError::Http { status, message } => serde_json::to_vec(&ErrorResponse {
                object: "error",
                message,
                r#type: &status.to_string(),
                param: None,
                code: *status,
            }),
            ApiError::Contract(error) => serde_json::to_vec(&ContractErrorBody { error }),
            ApiError::Unauthorized => Ok(br#"{"error":"Unauthorized"}"#.to_vec()),
            ApiError::Internal(_) => return None,
        };
        // Serialising a struct of strings and integers cannot fail.
        Some(body.unwrap_or_default())
    }

    /// The error event a stream carries instead of a 4xx, in the release's shape ([`wire::error_event`]).
    pub fn stream_event_json(&self, version: SglangVersion) -> Vec<u8> {
        wire::error_event(&self.client_message(), version)
    }

    /// The message a client is shown: an internal error's detail stays in the log.
    pub fn client_message(&self) -> Cow<'_, str> {
        match self {
            ApiError::Value(m)
            | ApiError::Validation(m)
            | ApiError::OpenAiBadRequest(m)
            | ApiError::Contract(m) => m.as_str().into(),
            ApiError::Pydantic(errors) => errors.message(None).into(),
            ApiError::Http { message, .. } | ApiError::OpenAi { message, .. } => {
                message.as_str().into()
            }
            ApiError::Internal(_) => "Internal Server Error".into(),
            ApiError::Unauthorized => "Unauthorized".into(),
        }
    }
}

#[derive(Serialize)]
struct MessageOnly<'a> {
    message: &'a str,
}

#[derive(Serialize)]
struct ContractErrorBody<'a> {
    error: &'a str,
}

#[derive(Serialize)]
struct ValueErrorBody<'a> {
    error: MessageOnly<'a>,
}

/// `ErrorResponse` of `entrypoints/openai/protocol.py`, field order included.
#[derive(Serialize)]
struct ErrorResponse<'a> {
    object: &'static str,
    message: &'a str,
    r#type: &'a str,
    param: Option<()>,
    code: u16,
}
