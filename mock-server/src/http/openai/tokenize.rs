//! `/tokenize` and `/detokenize` (also under `/v1/`), as SGLang's `serving_tokenize.py` serves them:
//! `{"prompt": str | [str], "add_special_tokens"}` or `{"messages": [...]}` (rendered with the chat template,
//! as for a chat completion) gives `{"tokens", "count", "max_model_len"}`, and
//! `{"tokens": [int] | [[int]], "skip_special_tokens"}` gives `{"text"}`. The toy tokenizer adds no special
//! tokens of its own, so `add_special_tokens` changes nothing for it, as for Qwen's; a loaded tokenizer adds
//! what its post-processor adds.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::request::{body_object, bool_field, render_chat, type_error, validation_error};
use crate::error::ApiError;
use crate::http::extract::OpenAiJson;
use crate::http::respond::json_value;
use crate::http::state::AppState;
use mock_core::request::py_repr;

/// `POST /tokenize`, `POST /v1/tokenize`.
pub(crate) async fn tokenize(
    State(state): State<AppState>,
    OpenAiJson(body): OpenAiJson,
) -> Response {
    answer(&state, &body, "tokenize", tokenize_body)
}

/// `POST /detokenize`, `POST /v1/detokenize`.
pub(crate) async fn detokenize(
    State(state): State<AppState>,
    OpenAiJson(body): OpenAiJson,
) -> Response {
    answer(&state, &body, "detokenize", detokenize_body)
}

/// Answers with `build`'s object or its error, once the body has passed the release's request model of `route`
/// (`TokenizeRequest`, `DetokenizeRequest`): Pydantic's errors for every field first, as FastAPI's.
fn answer(
    state: &AppState,
    body: &Value,
    route: &str,
    build: fn(&AppState, &Value) -> Result<Value, ApiError>,
) -> Response {
    if let Some(errors) =
        mock_core::request::openai_errors(body, state.config().sglang_version, route)
    {
        return ApiError::Pydantic(errors).into_response();
    }
    match build(state, body) {
        Ok(value) => json_value(&value),
        Err(err) => err.into_response(),
    }
}

fn tokenize_body(state: &AppState, body: &Value) -> Result<Value, ApiError> {
    let tokenizer = state.model().tokenizer();
    let obj = body_object(body)?;
    // The toy tokenizer adds no special tokens either way; a loaded one adds its post-processor's.
    let add_special_tokens = bool_field(obj, "add_special_tokens")?.unwrap_or(true);
    let encode = |text: &str| {
        if add_special_tokens {
            tokenizer.encode(text)
        } else {
            tokenizer.encode_plain(text)
        }
    };
    // `getattr(tokenizer, "model_max_length", -1)`: a loaded tokenizer's own limit, which is not the context
    // length (Qwen's says 131072 over a model of 4096). 0.5.23 falls back to the context length for a value beyond
    // 64 bits, such as transformers' `int(1e30)` when the file names none (`serving_tokenize.py`); the mock does so
    // under every release, and for the toy tokenizer, which has no file.
    let max_model_len = tokenizer
        .hf()
        .and_then(|vocab| vocab.model_max_length())
        .unwrap_or_else(|| i128::from(state.config().context_len()));
    let present = |key: &str| obj.get(key).filter(|v| !v.is_null());
    // `TokenizeRequest.validate_tokenize_input`, a model validator run after the fields: FastAPI's 400, with the
    // body as its input and the `ValueError` as its context.
    if present("prompt").is_some() == present("messages").is_some() {
        let reason = "Exactly one of 'prompt' or 'messages' must be provided.";
        return Err(ApiError::Pydantic(mock_core::ValidationErrors(vec![
            format!(
                "{{'type': 'value_error', 'loc': ('body',), 'msg': {}, 'input': {}, 'ctx': {{'error': ValueError({})}}}}",
                py_repr(&json!(format!("Value error, {reason}"))),
                py_repr(body),
                py_repr(&json!(reason)),
            ),
        ])));
    }
    if let Some(messages) = present("messages") {
        let messages = messages
            .as_array()
            .ok_or_else(|| type_error("messages", "list_type", "a valid list"))?;
        // 0.5.23 renders as given when `add_generation_prompt` is set; otherwise as for a chat completion.
        let add_generation_prompt = if state.config().sglang_version.tokenize_add_generation_prompt
        {
            bool_field(obj, "add_generation_prompt")?.unwrap_or(true)
        } else {
            true
        };
        let prompt = render_chat(
            state.config().sglang_version,
            tokenizer,
            obj,
            messages,
            add_generation_prompt,
        )?;
        // A rendered template is encoded without added special tokens (`serving_tokenize.py`).
        let tokens = tokenizer.encode_plain(&prompt);
        return Ok(
            json!({"tokens": tokens, "count": tokens.len(), "max_model_len": max_model_len}),
        );
    }
    match obj.get("prompt") {
        Some(Value::String(text)) => {
            let tokens = encode(text);
            Ok(json!({"tokens": tokens, "count": tokens.len(), "max_model_len": max_model_len}))
        }
        Some(Value::Array(texts)) => {
            let texts: Option<Vec<&str>> = texts.iter().map(Value::as_str).collect();
            let texts =
                texts.ok_or_else(|| type_error("prompt", "string_type", "a valid string"))?;
            let tokens: Vec<Vec<u32>> = texts.iter().map(|t| encode(t)).collect();
            let count: Vec<usize> = tokens.iter().map(Vec::len).collect();
            Ok(json!({"tokens": tokens, "count": count, "max_model_len": max_model_len}))
        }
        Some(_) => Err(type_error(
            "prompt",
            "union_type",
            "a valid string or a list of strings",
        )),
        None => Err(validation_error("missing", "'prompt'", "Field required")),
    }
}

fn detokenize_body(state: &AppState, body: &Value) -> Result<Value, ApiError> {
    let tokenizer = state.model().tokenizer();
    let obj = body_object(body)?;
    let skip = bool_field(obj, "skip_special_tokens")?.unwrap_or(true);
    let vocab = tokenizer.vocab_size();
    // `OpenAIServingDetokenize`: every element must be an int, then `tokenizer.decode` runs. A fast
    // tokenizer's decode converts each id to an unsigned 32-bit integer, so a negative id raises an
    // `OverflowError`, answered as a 500 (its text lacks "decode").
    let ids = |list: &[Value]| -> Result<Vec<u32>, ApiError> {
        if !list.iter().all(|v| v.is_i64() || v.is_u64()) {
            return Err(ApiError::openai_bad_request(
                "Invalid input: 'tokens' must be a list of integers.",
            ));
        }
        list.iter()
            .map(|v| match v.as_u64() {
                Some(id) if id < u64::from(vocab) => Ok(id as u32),
                Some(id) => Err(ApiError::openai_bad_request(format!(
                    "Error decoding tokens: token id {id} is not below the vocabulary size {vocab}. Input tokens \
                     might be invalid for the model."
                ))),
                None => Err(ApiError::OpenAi {
                    status: 500,
                    err_type: "InternalServerError",
                    message: "Internal server error during detokenization: out of range integral type \
                              conversion attempted"
                        .to_owned(),
                }),
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
        None => Err(validation_error("missing", "'tokens'", "Field required")),
    }
}
