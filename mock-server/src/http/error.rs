//! How an [`ApiError`] becomes a response: its status and SGLang's JSON body, or a plain-text 500.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        match self.json_body() {
            Some(body) => {
                (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
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
