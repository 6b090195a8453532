//! Why a request cannot be answered, as the part of SGLang that refuses it raises it. The error knows no
//! transport: the server crate answers each kind with SGLang's HTTP status and body (`mock_server::RequestError`),
//! a stream with the release's error event (`wire::error_event`).

/// A request refused by parsing, validation, planning or the engine, in the kinds SGLang raises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A Python `ValueError` (the tokenizer manager's checks, `SamplingParams.verify`).
    #[error("{0}")]
    Value(String),
    /// A FastAPI/Pydantic request validation error (a field of the wrong type, a body that is not JSON).
    #[error("{0}")]
    Validation(String),
    /// A violation of 0.5.23's JSON contract (`api_contract.generate_contract_error`), with the decoder's text.
    #[error("{0}")]
    Contract(String),
    /// An uncaught Python exception (the `TypeError` of an unknown sampling parameter, a failed engine): the
    /// detail is for the log, never for the client.
    #[error("internal error: {0}")]
    Internal(String),
}

impl RequestError {
    pub fn value(message: impl Into<String>) -> Self {
        RequestError::Value(message.into())
    }

    pub fn internal(detail: impl Into<String>) -> Self {
        RequestError::Internal(detail.into())
    }

    /// The message a client is shown: an internal error's detail stays in the log.
    pub fn client_message(&self) -> &str {
        match self {
            RequestError::Value(m) | RequestError::Validation(m) | RequestError::Contract(m) => {
                m.as_str()
            }
            RequestError::Internal(_) => "Internal Server Error",
        }
    }
}
