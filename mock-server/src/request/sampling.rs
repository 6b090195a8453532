//! `SamplingParams(**d)`, `normalize` and `verify`: raw sampling parameters become the engine's
//! [`SamplingParams`], with SGLang's messages for every rejected value.

use serde_json::Value;

use super::body::{RawSamplingParams, SamplingKey};
use crate::config::ServerConfig;
use crate::engine::SamplingParams;
use crate::error::ApiError;
use crate::pyfmt::{PyNum, str_repr};

/// `temperature` below this is greedy sampling (`_SAMPLING_EPS` in `sampling_params.py`).
const SAMPLING_EPS: f64 = 1e-6;
/// SGLang's default `max_new_tokens`.
pub const DEFAULT_MAX_NEW_TOKENS: u32 = 128;

/// Sampling parameters after `__post_init__`, `normalize` and `verify`.
#[derive(Debug, Clone)]
pub struct ResolvedSampling {
    pub params: SamplingParams,
    pub stream_interval: Option<u32>,
}

fn type_error(key: SamplingKey, want: &str, got: &Value) -> ApiError {
    ApiError::internal(format!(
        "TypeError: sampling_params.{} must be {want}, got {got}",
        key.name()
    ))
}

pub(super) fn int_value(key: SamplingKey, v: &Value) -> Result<i64, ApiError> {
    match v {
        Value::Number(num) => match (num.as_i64(), num.as_f64()) {
            (Some(i), _) => Ok(i),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
            _ => Err(type_error(key, "an int", v)),
        },
        _ => Err(type_error(key, "an int", v)),
    }
}

fn num_value(key: SamplingKey, v: &Value) -> Result<PyNum, ApiError> {
    match v {
        Value::Number(num) => match (num.as_i64(), num.as_f64()) {
            (Some(i), _) if !num.is_f64() => Ok(PyNum::Int(i)),
            (_, Some(f)) => Ok(PyNum::Float(f)),
            _ => Err(type_error(key, "a number", v)),
        },
        _ => Err(type_error(key, "a number", v)),
    }
}

fn bool_value(key: SamplingKey, v: &Value) -> Result<bool, ApiError> {
    match v {
        Value::Bool(b) => Ok(*b),
        // Python truthiness of an int.
        Value::Number(num) => Ok(num.as_f64().is_some_and(|f| f != 0.0)),
        _ => Err(type_error(key, "a bool", v)),
    }
}

fn opt<T>(
    raw: &RawSamplingParams,
    key: SamplingKey,
    f: impl FnOnce(SamplingKey, &Value) -> Result<T, ApiError>,
) -> Result<Option<T>, ApiError> {
    raw.non_null(key).map(|v| f(key, v)).transpose()
}

/// `SamplingParams(**d)` then `verify(vocab_size)`, with SGLang's messages; an unknown key or a wrong type is
/// the uncaught `TypeError` (HTTP 500) it is in SGLang.
pub fn resolve_sampling_params(
    raw: &RawSamplingParams,
    vocab_size: u32,
    prompt_len: usize,
    config: &ServerConfig,
) -> Result<ResolvedSampling, ApiError> {
    if let Some(key) = &raw.unknown_key {
        return Err(ApiError::internal(format!(
            "TypeError: SamplingParams.__init__() got an unexpected keyword argument {}",
            str_repr(key)
        )));
    }
    use SamplingKey as K;
    let max_new_tokens = opt(raw, K::MaxNewTokens, int_value)?;
    let mut temperature = opt(raw, K::Temperature, num_value)?.unwrap_or(PyNum::Float(1.0));
    let top_p = opt(raw, K::TopP, num_value)?.unwrap_or(PyNum::Float(1.0));
    let mut top_k = opt(raw, K::TopK, int_value)?.unwrap_or(-1);
    let min_p = opt(raw, K::MinP, num_value)?.unwrap_or(PyNum::Float(0.0));
    let frequency_penalty = opt(raw, K::FrequencyPenalty, num_value)?.unwrap_or(PyNum::Float(0.0));
    let presence_penalty = opt(raw, K::PresencePenalty, num_value)?.unwrap_or(PyNum::Float(0.0));
    let repetition_penalty =
        opt(raw, K::RepetitionPenalty, num_value)?.unwrap_or(PyNum::Float(1.0));
    let min_new_tokens = opt(raw, K::MinNewTokens, int_value)?.unwrap_or(0);
    let ignore_eos = opt(raw, K::IgnoreEos, bool_value)?.unwrap_or(false);
    let skip_special_tokens = opt(raw, K::SkipSpecialTokens, bool_value)?.unwrap_or(true);
    opt(raw, K::SpacesBetweenSpecialTokens, bool_value)?;
    let no_stop_trim = opt(raw, K::NoStopTrim, bool_value)?.unwrap_or(false);
    let stream_interval = opt(raw, K::StreamInterval, int_value)?;
    let sampling_seed = opt(raw, K::SamplingSeed, int_value)?;
    let stop = opt(raw, K::Stop, |key, v| match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                _ => Err(type_error(key, "a str or a list of str", v)),
            })
            .collect(),
        _ => Err(type_error(key, "a str or a list of str", v)),
    })?
    .unwrap_or_default();
    opt(raw, K::StopRegex, |key, v| match v {
        Value::String(_) | Value::Array(_) => Ok(()),
        _ => Err(type_error(key, "a str or a list of str", v)),
    })?;
    let stop_token_ids = opt(raw, K::StopTokenIds, |key, v| match v {
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::Null => {}
                    _ => out.push(int_value(key, item)?),
                }
            }
            Ok(out)
        }
        _ => Err(type_error(key, "a list of int", v)),
    })?
    .unwrap_or_default();
    let logit_bias = opt(raw, K::LogitBias, |key, v| match v {
        Value::Object(map) => {
            for value in map.values() {
                num_value(key, value)?;
            }
            Ok(map.keys().cloned().collect::<Vec<String>>())
        }
        _ => Err(type_error(key, "a dict", v)),
    })?;
    // Grammar constraints are accepted and not applied (the toy model has no grammar backend).
    let grammars = [K::JsonSchema, K::Regex, K::Ebnf]
        .iter()
        .filter(|k| raw.non_null(**k).is_some())
        .count();

    // `__post_init__`: near-zero temperature is greedy.
    let t = temperature.as_f64();
    if (0.0..SAMPLING_EPS).contains(&t) {
        temperature = PyNum::Float(1.0);
        top_k = 1;
    }

    // `verify`, in SGLang's order and wording.
    let t = temperature.as_f64();
    if !t.is_finite() || t < 0.0 {
        return Err(ApiError::value(format!(
            "temperature must be a non-negative finite number, got {temperature}."
        )));
    }
    let p = top_p.as_f64();
    if !(p > 0.0 && p <= 1.0) {
        return Err(ApiError::value(format!(
            "top_p must be in (0, 1], got {top_p}."
        )));
    }
    let mp = min_p.as_f64();
    if !(0.0..=1.0).contains(&mp) {
        return Err(ApiError::value(format!(
            "min_p must be in [0, 1], got {min_p}."
        )));
    }
    if top_k < 1 && top_k != -1 {
        return Err(ApiError::value(format!(
            "top_k must be -1 (disable) or at least 1, got {top_k}."
        )));
    }
    if !(-2.0..=2.0).contains(&frequency_penalty.as_f64()) {
        return Err(ApiError::value(format!(
            "frequency_penalty must be in [-2, 2], got {frequency_penalty}."
        )));
    }
    if !(-2.0..=2.0).contains(&presence_penalty.as_f64()) {
        return Err(ApiError::value(format!(
            "presence_penalty must be in [-2, 2], got {presence_penalty}."
        )));
    }
    let rp = repetition_penalty.as_f64();
    if !(rp > 0.0 && rp <= 2.0) {
        return Err(ApiError::value(format!(
            "repetition_penalty must be in (0, 2] (1.0 = no penalty), got {repetition_penalty}."
        )));
    }
    if min_new_tokens < 0 {
        return Err(ApiError::value(format!(
            "min_new_tokens must be in [0, max_new_tokens], got {min_new_tokens}."
        )));
    }
    let max_new = max_new_tokens.unwrap_or(i64::from(DEFAULT_MAX_NEW_TOKENS));
    if max_new < 0 {
        return Err(ApiError::value(format!(
            "max_new_tokens must be at least 0, got {max_new}."
        )));
    }
    if min_new_tokens > max_new {
        return Err(ApiError::value(format!(
            "min_new_tokens must be in [0, max_new_tokens({max_new})], got {min_new_tokens}."
        )));
    }
    if let Some(keys) = logit_bias {
        for key in keys {
            match key.trim().parse::<i64>() {
                Ok(id) if (0..i64::from(vocab_size)).contains(&id) => {}
                Ok(_) => {
                    return Err(ApiError::value(format!(
                        "logit_bias must has keys in [0, {}], got {key}.",
                        vocab_size - 1
                    )));
                }
                Err(_) => {
                    return Err(ApiError::value(format!(
                        "invalid literal for int() with base 10: {}",
                        str_repr(&key)
                    )));
                }
            }
        }
    }
    if grammars > 1 {
        return Err(ApiError::value(
            "Only one of regex, json_schema, or ebnf can be set.",
        ));
    }

    // The scheduler caps the completion at the context window: `max_req_len - len(prompt) - 1` with
    // `max_req_len = context_len - 1`.
    let cap = u64::from(config.context_length).saturating_sub(prompt_len as u64 + 2);
    let max_new_tokens = (max_new as u64).min(cap).min(u64::from(u32::MAX)) as u32;
    let vocab = u64::from(vocab_size);
    let params = SamplingParams {
        max_new_tokens,
        min_new_tokens: (min_new_tokens as u64).min(u64::from(max_new_tokens)) as u32,
        temperature: temperature.as_f64(),
        top_p: p,
        top_k: if top_k == -1 || top_k as u64 >= vocab {
            None
        } else {
            Some(top_k as u32)
        },
        min_p: mp,
        stop: stop.into_iter().collect(),
        // Ids outside the vocabulary can never be sampled, so dropping them changes nothing.
        stop_token_ids: stop_token_ids
            .into_iter()
            .filter(|&id| id >= 0 && (id as u64) < vocab)
            .map(|id| id as u32)
            .collect(),
        ignore_eos,
        skip_special_tokens,
        no_stop_trim,
        sampling_seed: sampling_seed.map(|s| s as u64),
    };
    Ok(ResolvedSampling {
        params,
        stream_interval: stream_interval.map(|si| si.clamp(0, i64::from(u32::MAX)) as u32),
    })
}
