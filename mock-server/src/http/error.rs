//! How an [`ApiError`] becomes a response: its status and SGLang's JSON body, or a plain-text 500.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use mock_core::ValidationErrors;

use crate::error::ApiError;

/// A validation error's errors, kept on its response so that the outermost layer, which knows the request's
/// method and path, can add the endpoint's frame to the message (`extract::read_whole_body`).
#[derive(Debug, Clone)]
pub(crate) struct PendingFrame(pub(crate) ValidationErrors);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        match self.json_body() {
            Some(body) => {
                let mut response =
                    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
                if let ApiError::Pydantic(errors) = self {
                    response.extensions_mut().insert(PendingFrame(errors));
                }
                response
            }
            None => {
                tracing::error!(detail = %self, "answering with a plain 500");
                (
                    status,
                    [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                    "Internal Server Error",
                )
                    .into_response()
            }
        }
    }
}
