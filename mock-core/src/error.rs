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
    Validation(ValidationErrors),
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
    pub fn client_message(&self) -> std::borrow::Cow<'_, str> {
        match self {
            RequestError::Value(m) | RequestError::Contract(m) => m.as_str().into(),
            RequestError::Validation(errors) => errors.message(None).into(),
            RequestError::Internal(_) => "Internal Server Error".into(),
        }
    }
}

/// The errors of a FastAPI `RequestValidationError`, each the dict Pydantic reports written as Python writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<String>);

impl ValidationErrors {
    /// What SGLang's `validation_exception_handler` answers: `str(exc)` (FastAPI's `ValidationException.__str__`:
    /// the count, one error per line, and the endpoint's frame when FastAPI knows it, `\n  File "...", line N,
    /// in handler\n    POST /path`), a space, and `str(exc.errors())`.
    pub fn message(&self, endpoint: Option<&str>) -> String {
        let n = self.0.len();
        let mut out = format!("{n} validation error{}:", if n == 1 { "" } else { "s" });
        for error in &self.0 {
            out.push_str("\n  ");
            out.push_str(error);
        }
        if let Some(frame) = endpoint {
            out.push('\n');
            out.push_str(frame);
        }
        out.push_str(" [");
        out.push_str(&self.0.join(", "));
        out.push(']');
        out
    }
}

impl std::fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message(None))
    }
}
