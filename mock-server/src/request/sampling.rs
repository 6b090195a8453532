//! `SamplingParams(**d)`, `normalize` and `verify`: raw sampling parameters become the engine's
//! [`SamplingParams`], with SGLang's messages for every rejected value.

use serde_json::Value;

use super::lax::{RawSamplingParams, SamplingKey};
use crate::config::{ServerConfig, SglangVersion};
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
    let mut typed = Typed::read(raw)?;
    typed.post_init();
    typed.verify(vocab_size, config.sglang_version)?;
    Ok(typed.resolve(vocab_size, prompt_len, config))
}

/// The sampling parameters with Python's types, as `SamplingParams.__init__` stores them.
struct Typed {
    max_new_tokens: Option<i64>,
    temperature: PyNum,
    top_p: PyNum,
    top_k: i64,
    min_p: PyNum,
    frequency_penalty: PyNum,
    presence_penalty: PyNum,
    repetition_penalty: PyNum,
    min_new_tokens: i64,
    ignore_eos: bool,
    skip_special_tokens: bool,
    no_stop_trim: bool,
    stream_interval: Option<i64>,
    sampling_seed: Seed,
    stop: Vec<String>,
    stop_token_ids: Vec<i64>,
    /// The keys of `logit_bias`, checked against the vocabulary by `verify`.
    logit_bias: Option<Vec<String>>,
    /// How many of `json_schema`, `regex` and `ebnf` are set.
    grammars: usize,
}

impl Typed {
    /// `SamplingParams(**d)`: every key typed, or the `TypeError` of the first that is not.
    fn read(raw: &RawSamplingParams) -> Result<Typed, ApiError> {
        if let Some(key) = &raw.unknown_key {
            return Err(ApiError::internal(format!(
                "TypeError: SamplingParams.__init__() got an unexpected keyword argument {}",
                str_repr(key)
            )));
        }
        use SamplingKey as K;
        let max_new_tokens = opt(raw, K::MaxNewTokens, int_value)?;
        let temperature = opt(raw, K::Temperature, num_value)?.unwrap_or(PyNum::Float(1.0));
        let top_p = opt(raw, K::TopP, num_value)?.unwrap_or(PyNum::Float(1.0));
        let top_k = opt(raw, K::TopK, int_value)?.unwrap_or(-1);
        let min_p = opt(raw, K::MinP, num_value)?.unwrap_or(PyNum::Float(0.0));
        let frequency_penalty =
            opt(raw, K::FrequencyPenalty, num_value)?.unwrap_or(PyNum::Float(0.0));
        let presence_penalty =
            opt(raw, K::PresencePenalty, num_value)?.unwrap_or(PyNum::Float(0.0));
        let repetition_penalty =
            opt(raw, K::RepetitionPenalty, num_value)?.unwrap_or(PyNum::Float(1.0));
        let min_new_tokens = opt(raw, K::MinNewTokens, int_value)?.unwrap_or(0);
        let ignore_eos = opt(raw, K::IgnoreEos, bool_value)?.unwrap_or(false);
        let skip_special_tokens = opt(raw, K::SkipSpecialTokens, bool_value)?.unwrap_or(true);
        opt(raw, K::SpacesBetweenSpecialTokens, bool_value)?;
        let no_stop_trim = opt(raw, K::NoStopTrim, bool_value)?.unwrap_or(false);
        let stream_interval = opt(raw, K::StreamInterval, int_value)?;
        let sampling_seed = Seed::read(raw);
        let stop = opt(raw, K::Stop, str_or_str_list)?.unwrap_or_default();
        opt(raw, K::StopRegex, |key, v| match v {
            Value::String(_) | Value::Array(_) => Ok(()),
            _ => Err(type_error(key, "a str or a list of str", v)),
        })?;
        let stop_token_ids = opt(raw, K::StopTokenIds, int_list)?.unwrap_or_default();
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
        Ok(Typed {
            max_new_tokens,
            temperature,
            top_p,
            top_k,
            min_p,
            frequency_penalty,
            presence_penalty,
            repetition_penalty,
            min_new_tokens,
            ignore_eos,
            skip_special_tokens,
            no_stop_trim,
            stream_interval,
            sampling_seed,
            stop,
            stop_token_ids,
            logit_bias,
            grammars,
        })
    }

    /// `__post_init__`: near-zero temperature is greedy.
    fn post_init(&mut self) {
        if (0.0..SAMPLING_EPS).contains(&self.temperature.as_f64()) {
            self.temperature = PyNum::Float(1.0);
            self.top_k = 1;
        }
    }

    /// `verify`, in SGLang's order and wording.
    fn verify(&self, vocab_size: u32, version: SglangVersion) -> Result<(), ApiError> {
        let Typed {
            temperature,
            top_p,
            min_p,
            top_k,
            min_new_tokens,
            ..
        } = self;
        let (frequency_penalty, presence_penalty) =
            (&self.frequency_penalty, &self.presence_penalty);
        let repetition_penalty = &self.repetition_penalty;
        let t = temperature.as_f64();
        match version {
            SglangVersion::V0_5_3 if t < 0.0 => {
                return Err(ApiError::value(format!(
                    "temperature must be non-negative, got {temperature}."
                )));
            }
            SglangVersion::V0_5_3 => {}
            SglangVersion::V0_5_15 | SglangVersion::V0_5_23 if !t.is_finite() || t < 0.0 => {
                return Err(ApiError::value(format!(
                    "temperature must be a non-negative finite number, got {temperature}."
                )));
            }
            SglangVersion::V0_5_15 | SglangVersion::V0_5_23 => {}
        }
        let p = top_p.as_f64();
        if !(p > 0.0 && p <= 1.0) {
            return Err(ApiError::value(format!(
                "top_p must be in (0, 1], got {top_p}."
            )));
        }
        if !(0.0..=1.0).contains(&min_p.as_f64()) {
            return Err(ApiError::value(format!(
                "min_p must be in [0, 1], got {min_p}."
            )));
        }
        if *top_k < 1 && *top_k != -1 {
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
        match version {
            SglangVersion::V0_5_3 if !(0.0..=2.0).contains(&rp) => {
                return Err(ApiError::value(format!(
                    "repetition_penalty must be in [0, 2], got {repetition_penalty}."
                )));
            }
            SglangVersion::V0_5_3 => {}
            SglangVersion::V0_5_15 | SglangVersion::V0_5_23 if !(rp > 0.0 && rp <= 2.0) => {
                return Err(ApiError::value(format!(
                    "repetition_penalty must be in (0, 2] (1.0 = no penalty), got {repetition_penalty}."
                )));
            }
            SglangVersion::V0_5_15 | SglangVersion::V0_5_23 => {}
        }
        if *min_new_tokens < 0 {
            return Err(ApiError::value(format!(
                "min_new_tokens must be in [0, max_new_tokens], got {min_new_tokens}."
            )));
        }
        let max_new = self.max_new();
        if max_new < 0 {
            return Err(ApiError::value(format!(
                "max_new_tokens must be at least 0, got {max_new}."
            )));
        }
        if *min_new_tokens > max_new {
            return Err(ApiError::value(format!(
                "min_new_tokens must be in [0, max_new_tokens({max_new})], got {min_new_tokens}."
            )));
        }
        if let Some(keys) = &self.logit_bias {
            verify_logit_bias(keys, vocab_size)?;
        }
        self.sampling_seed.verify(version)?;
        if self.grammars > 1 {
            return Err(ApiError::value(
                "Only one of regex, json_schema, or ebnf can be set.",
            ));
        }
        Ok(())
    }

    fn max_new(&self) -> i64 {
        self.max_new_tokens
            .unwrap_or(i64::from(DEFAULT_MAX_NEW_TOKENS))
    }

    /// The engine's parameters: the completion capped at the context window, top-k off when it covers the
    /// vocabulary, stop ids outside the vocabulary dropped.
    fn resolve(
        self,
        vocab_size: u32,
        prompt_len: usize,
        config: &ServerConfig,
    ) -> ResolvedSampling {
        // The scheduler caps the completion at the context window: `max_req_len - len(prompt) - 1` with
        // `max_req_len = context_len - 1`.
        let cap = u64::from(config.context_length).saturating_sub(prompt_len as u64 + 2);
        let max_new_tokens = (self.max_new() as u64).min(cap).min(u64::from(u32::MAX)) as u32;
        let vocab = u64::from(vocab_size);
        let top_k = self.top_k;
        let params = SamplingParams {
            max_new_tokens,
            min_new_tokens: (self.min_new_tokens as u64).min(u64::from(max_new_tokens)) as u32,
            temperature: self.temperature.as_f64(),
            top_p: self.top_p.as_f64(),
            top_k: if top_k == -1 || top_k as u64 >= vocab {
                None
            } else {
                Some(top_k as u32)
            },
            min_p: self.min_p.as_f64(),
            stop: self.stop.into_iter().collect(),
            // Ids outside the vocabulary can never be sampled, so dropping them changes nothing.
            stop_token_ids: self
                .stop_token_ids
                .into_iter()
                .filter(|&id| id >= 0 && (id as u64) < vocab)
                .map(|id| id as u32)
                .collect(),
            ignore_eos: self.ignore_eos,
            skip_special_tokens: self.skip_special_tokens,
            no_stop_trim: self.no_stop_trim,
            sampling_seed: self.sampling_seed.key(),
        };
        ResolvedSampling {
            params,
            stream_interval: self
                .stream_interval
                .map(|si| si.clamp(0, i64::from(u32::MAX)) as u32),
        }
    }
}

/// `sampling_seed` as `SamplingParams` holds it: whatever JSON value was sent. SGLang reads it only under
/// deterministic inference; the mock seeds its sampler with it (MODEL.md section 8.3).
#[derive(Debug, Clone, PartialEq)]
enum Seed {
    /// Not sent.
    Absent,
    /// An explicit `null`.
    Null,
    /// A Python int within `u64` or `i64` (a bool is an int too).
    Int(i128),
    /// A Python int beyond them, as its literal.
    Big(String),
    /// A float.
    Float(f64),
    /// A string, list or dict.
    Other,
}

impl Seed {
    fn read(raw: &RawSamplingParams) -> Seed {
        if let Some(literal) = &raw.big_seed {
            return Seed::Big(literal.clone());
        }
        match raw.get(SamplingKey::SamplingSeed) {
            None => Seed::Absent,
            Some(Value::Null) => Seed::Null,
            Some(Value::Bool(b)) => Seed::Int(i128::from(*b)),
            Some(Value::Number(n)) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => Seed::Int(i128::from(i)),
                (None, Some(u), _) => Seed::Int(i128::from(u)),
                (None, None, Some(f)) => Seed::Float(f),
                (None, None, None) => Seed::Other,
            },
            Some(_) => Seed::Other,
        }
    }

    /// `verify`'s seed checks: 0.5.3 refuses `None` (its default is 42), 0.5.23 refuses integers outside
    /// `i64` (its contract gate has already refused every non-integer), 0.5.15 checks nothing.
    fn verify(&self, version: SglangVersion) -> Result<(), ApiError> {
        let out_of_range = |v: &dyn std::fmt::Display| {
            Err(ApiError::value(format!(
                "sampling_seed must be in [-2**63, 2**63 - 1], got {v}."
            )))
        };
        match (version, self) {
            (SglangVersion::V0_5_3, Seed::Null) => {
                Err(ApiError::value("sampling_seed should not be None"))
            }
            (SglangVersion::V0_5_23, Seed::Int(v)) if i64::try_from(*v).is_err() => out_of_range(v),
            (SglangVersion::V0_5_23, Seed::Big(literal)) => out_of_range(literal),
            (SglangVersion::V0_5_3 | SglangVersion::V0_5_15 | SglangVersion::V0_5_23, _) => Ok(()),
        }
    }

    /// The seed the sampler's key takes, mod 2^64: an integer, or a float with an integral value; any other value
    /// seeds nothing.
    fn key(&self) -> Option<u64> {
        match self {
            // `as` keeps the low 64 bits: the value mod 2^64.
            Seed::Int(v) => Some(*v as u64),
            Seed::Big(literal) => Some(literal_mod_2_64(literal)),
            Seed::Float(f) if f.is_finite() && f.fract() == 0.0 => Some(*f as i128 as u64),
            Seed::Absent | Seed::Null | Seed::Float(_) | Seed::Other => None,
        }
    }
}

/// A JSON integer literal mod 2^64, digit by digit.
fn literal_mod_2_64(literal: &str) -> u64 {
    let (negative, digits) = match literal.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, literal),
    };
    let magnitude = digits.bytes().fold(0u64, |acc, d| {
        acc.wrapping_mul(10)
            .wrapping_add(u64::from(d.wrapping_sub(b'0')))
    });
    if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    }
}

/// `stop`: a string or a list of strings.
fn str_or_str_list(key: SamplingKey, v: &Value) -> Result<Vec<String>, ApiError> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                _ => Err(type_error(key, "a str or a list of str", v)),
            })
            .collect(),
        _ => Err(type_error(key, "a str or a list of str", v)),
    }
}

/// `stop_token_ids`: a list of ints, `None` entries skipped.
fn int_list(key: SamplingKey, v: &Value) -> Result<Vec<i64>, ApiError> {
    match v {
        Value::Array(items) => items
            .iter()
            .filter(|item| !item.is_null())
            .map(|item| int_value(key, item))
            .collect(),
        _ => Err(type_error(key, "a list of int", v)),
    }
}

/// `logit_bias` keys are token ids as strings, inside the vocabulary.
fn verify_logit_bias(keys: &[String], vocab_size: u32) -> Result<(), ApiError> {
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
                    str_repr(key)
                )));
            }
        }
    }
    Ok(())
}
