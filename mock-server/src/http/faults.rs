//! HTTP-level faults: the `X-Mock-Fault` header and the schedule decide a request's fault; `status`, `delay`,
//! `hang` and `reset` answer here, before any handler, for every endpoint but the generating ones.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::conn::ConnHandle;
use super::extract::Conn;
use super::state::AppState;
use crate::control::QUEUE_FULL_MESSAGE;
use crate::error::ApiError;
use crate::faults::{FAULT_HEADER, Fault, HttpFault};

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
        state.faults().record(fault.kind());
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
    let fault = match fault {
        Fault::Http(fault) => fault,
        // The other classes act on the answer, in the engine, or on the stream, later.
        Fault::Body(_) | Fault::Stream(_) | Fault::Engine(_) => return None,
    };
    match fault {
        HttpFault::Status {
            code,
            retry_after,
            message,
        } => Some(status_fault(*code, *retry_after, message.clone())),
        HttpFault::Delay { ms } => {
            tokio::time::sleep(Duration::from_millis(*ms)).await;
            None
        }
        HttpFault::Hang { ms } => {
            // A hung request must not hold a graceful shutdown for its whole `ms` (ten minutes by default).
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(*ms)) => {}
                () = state.shutting_down() => {}
            }
            Some(reset_response(conn))
        }
        HttpFault::Reset => Some(reset_response(conn)),
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
fn status_fault(code: u16, retry_after: u64, message: Option<String>) -> Response {
    let err = match code {
        400 => {
            ApiError::value(message.unwrap_or_else(|| "Bad request (injected fault).".to_owned()))
        }
        500 if message.is_none() => ApiError::internal("injected 500"),
        503 => ApiError::Http {
            status: 503,
            message: message.unwrap_or_else(|| QUEUE_FULL_MESSAGE.to_owned()),
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
        let secs = retry_after.to_string();
        if let Ok(value) = axum::http::HeaderValue::from_str(&secs) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
    }
    response
}

/// HTTP-level faults on the routes this middleware wraps: every endpoint but `/generate` and the OpenAI
/// routes (which decide their own, knowing `stream`), the admin endpoints and `/metrics`.
pub(crate) async fn http_faults(
    State(state): State<AppState>,
    Conn(conn): Conn,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_owned();
    let fault = match decide_fault(&state, &path, false, req.headers()) {
        Ok(fault) => fault,
        Err(err) => return err.into_response(),
    };
    if let Some(fault) = fault
        && let Some(response) = http_fault(&state, &fault, conn.as_ref()).await
    {
        return response;
    }
    next.run(req).await
}
