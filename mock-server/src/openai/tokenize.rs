//! `/tokenize` and `/detokenize` (also under `/v1/`), as SGLang's `serving_tokenize.py` serves them:
//! `{"prompt": str | [str], "add_special_tokens"}` gives `{"tokens", "count", "max_model_len"}`, and
//! `{"tokens": [int] | [[int]], "skip_special_tokens"}` gives `{"text"}`. The toy tokenizer adds no special
//! tokens of its own, so `add_special_tokens` changes nothing, as for Qwen's.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::check_content_type;
use super::request::{body_object, bool_field, type_error};
use crate::error::ApiError;
use crate::request as native;
use crate::routes::{self, AppState};

/// `POST /tokenize`, `POST /v1/tokenize`.
pub async fn tokenize(State(state): State<AppState>, req: Request) -> Response {
    answer(&state, req, tokenize_body).await
}

/// `POST /detokenize`, `POST /v1/detokenize`.
pub async fn detokenize(State(state): State<AppState>, req: Request) -> Response {
    answer(&state, req, detokenize_body).await
}

/// Read the JSON body and answer with `build`'s object or its error.
async fn answer(
    state: &AppState,
    req: Request,
    build: fn(&AppState, &Value) -> Result<Value, ApiError>,
) -> Response {
    match read_json(state, req)
        .await
        .and_then(|body| build(state, &body))
    {
        Ok(value) => json_ok(&value),
        Err(err) => err.into_response(),
    }
}

fn json_ok(value: &Value) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

async fn read_json(state: &AppState, req: Request) -> Result<Value, ApiError> {
    let (parts, body) = req.into_parts();
    check_content_type(&parts.headers)?;
    let bytes = routes::read_body(body, state.config().max_body_bytes).await?;
    serde_json::from_slice(&bytes)
        .map_err(|err| ApiError::Validation(native::json_decode_message(&err)))
}

fn tokenize_body(state: &AppState, body: &Value) -> Result<Value, ApiError> {
    let tokenizer = state.model().tokenizer();
    let obj = body_object(body)?;
    // Checked for its type; the toy tokenizer adds no special tokens either way.
    bool_field(obj, "add_special_tokens")?;
    let max_model_len = state.config().context_length;
    match obj.get("prompt") {
        Some(Value::String(text)) => {
            let tokens = tokenizer.encode(text);
            Ok(json!({"tokens": tokens, "count": tokens.len(), "max_model_len": max_model_len}))
        }
        Some(Value::Array(texts)) => {
            let texts: Option<Vec<&str>> = texts.iter().map(Value::as_str).collect();
            let texts =
                texts.ok_or_else(|| type_error("prompt", "string_type", "a valid string"))?;
            let tokens: Vec<Vec<u32>> = texts.iter().map(|t| tokenizer.encode(t)).collect();
            let count: Vec<usize> = tokens.iter().map(Vec::len).collect();
            Ok(json!({"tokens": tokens, "count": count, "max_model_len": max_model_len}))
        }
        Some(_) => Err(type_error(
            "prompt",
            "union_type",
            "a valid string or a list of strings",
        )),
        None => Err(native::validation_error(
            "missing",
            "'prompt'",
            "Field required",
        )),
    }
}

fn detokenize_body(state: &AppState, body: &Value) -> Result<Value, ApiError> {
    let tokenizer = state.model().tokenizer();
    let obj = body_object(body)?;
    let skip = bool_field(obj, "skip_special_tokens")?.unwrap_or(true);
    let vocab = tokenizer.vocab_size();
    let ids = |list: &[Value]| -> Result<Vec<u32>, ApiError> {
        list.iter()
            .map(|v| match v.as_u64() {
                Some(id) if id < u64::from(vocab) => Ok(id as u32),
                Some(id) => Err(ApiError::openai_bad_request(format!(
                    "Error decoding tokens: token id {id} is not below the vocabulary size {vocab}. Input tokens \
                     might be invalid for the model."
                ))),
                None => Err(ApiError::openai_bad_request(
                    "Invalid input: 'tokens' must be a list of integers.",
                )),
            })
            .collect()
    };
    match obj.get("tokens") {
        Some(Value::Array(list)) if list.is_empty() => Ok(json!({"text": ""})),
        Some(Value::Array(list)) if list[0].is_array() => {
            let texts: Result<Vec<String>, ApiError> = list
                .iter()
                .map(|sub| {
                    let sub = sub.as_array().ok_or_else(|| {
                        ApiError::openai_bad_request(
                            "Invalid input: 'tokens' must be a list of lists of integers.",
                        )
                    })?;
                    Ok(tokenizer.decode(&ids(sub)?, skip))
                })
                .collect();
            Ok(json!({"text": texts?}))
        }
        Some(Value::Array(list)) => Ok(json!({"text": tokenizer.decode(&ids(list)?, skip)})),
        Some(_) => Err(type_error("tokens", "list_type", "a valid list")),
        None => Err(native::validation_error(
            "missing",
            "'tokens'",
            "Field required",
        )),
    }
}
