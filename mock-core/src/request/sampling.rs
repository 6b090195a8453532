//! `SamplingParams(**d)`, `normalize` and `verify`: raw sampling parameters become the engine's
//! [`SamplingParams`], with SGLang's messages for every rejected value.

use serde_json::Value;

use super::lax::{RawSamplingParams, SamplingKey};
use crate::config::{ServerConfig, SglangVersion};
use crate::engine::{SamplingParams, StopRegex};
use crate::error::RequestError;
use crate::pyfmt::{PyNum, str_repr};
use crate::release::{NonTextStop, NullSamplingValues, SeedRule, Verify};

/// `temperature` below this is greedy sampling (`_SAMPLING_EPS` in `sampling_params.py`).
const SAMPLING_EPS: f64 = 1e-6;
/// The scheduler's abort of a constrained item on a server launched with `--grammar-backend none`
/// (`GrammarManager.process_req_with_grammar`, 0.5.15 and 0.5.23; 0.5.3's scheduler asserts a backend instead and
/// dies, and the mock answers it with the later releases' abort). The mock is such a server: its toy model has no
/// grammar to constrain its sampling with.
pub(super) const GRAMMAR_BACKEND_NONE: &str = "Grammar-based generation (json_schema, regex, ebnf, structural_tag) is not \
     supported when the server is launched with --grammar-backend none";

/// `MAX_STOP_COUNT` of 0.5.23's `sampling_params.py`: the most stop strings.
const MAX_STOP_COUNT: usize = 32;
/// `MAX_STOP_REGEX_COUNT`: the most `stop_regex` patterns.
const MAX_STOP_REGEX_COUNT: usize = 32;
/// `MAX_STOP_REGEX_LEN`: a pattern's bound in UTF-8 bytes.
const MAX_STOP_REGEX_BYTES: usize = 256;

/// SGLang's default `max_new_tokens`.
pub const DEFAULT_MAX_NEW_TOKENS: u32 = 128;

/// Sampling parameters after `__post_init__`, `normalize` and `verify`.
#[derive(Debug, Clone)]
pub struct ResolvedSampling {
    pub params: SamplingParams,
    pub stream_interval: Option<u32>,
    /// `top_k` as `SamplingParams` holds it after `__post_init__`: 1 when greedy, `1 << 30` for `-1`.
    pub normalized_top_k: i64,
    /// `custom_params.return_top_p_token_ids`, read as slime's patched `SamplingBatchInfo` reads it: `custom_params`
    /// a dict whose entry is truthy.
    pub return_top_p_token_ids: bool,
    /// `max_new_tokens` was a float and reaches `finish_reason.length` as one (`4.0`).
    pub length_as_float: bool,
    /// A grammar constraint is set (`json_schema`, `regex`, `ebnf` or `structural_tag`): the server has no
    /// grammar backend, so the scheduler refuses the item (`GRAMMAR_BACKEND_NONE`).
    pub constrained: bool,
}

/// Python's `bool()` of a JSON value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn type_error(key: SamplingKey, want: &str, got: &Value) -> RequestError {
    RequestError::internal(format!(
        "TypeError: sampling_params.{} must be {want}, got {got}",
        key.name()
    ))
}

pub(super) fn int_value(key: SamplingKey, v: &Value) -> Result<i64, RequestError> {
    int_num(key, v).map(PyNum::as_int)
}

/// An `int` as Python holds it: a JSON integer (or a float with no fraction, which JSON cannot tell apart), or a
/// `bool`, which is an `int` in Python and prints as `True` or `False` (`top_k: false` is refused with `got
/// False.`).
#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "a JSON value's type check: any other JSON type is the refusal"
)]
fn int_num(key: SamplingKey, v: &Value) -> Result<PyNum, RequestError> {
    match v {
        Value::Bool(b) => Ok(PyNum::Bool(*b)),
        Value::Number(num) => match (num.as_i64(), num.as_f64()) {
            (Some(i), _) if !num.is_f64() => Ok(PyNum::Int(i)),
            // A float that holds an integer stays a float in Python: its messages say `4.0`.
            (_, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(PyNum::Float(f)),
            _ => Err(type_error(key, "an int", v)),
        },
        _ => Err(type_error(key, "an int", v)),
    }
}

#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "a JSON value's type check: any other JSON type is the refusal"
)]
fn num_value(key: SamplingKey, v: &Value) -> Result<PyNum, RequestError> {
    match v {
        Value::Bool(b) => Ok(PyNum::Bool(*b)),
        Value::Number(num) => match (num.as_i64(), num.as_f64()) {
            (Some(i), _) if !num.is_f64() => Ok(PyNum::Int(i)),
            (_, Some(f)) => Ok(PyNum::Float(f)),
            _ => Err(type_error(key, "a number", v)),
        },
        _ => Err(type_error(key, "a number", v)),
    }
}

/// A flag as `SamplingParams` uses it, in an `if`: Python's truthiness of whatever was sent (`"true"`, `[]`; the
/// running 0.5.15 answers both).
fn bool_value(_: SamplingKey, v: &Value) -> Result<bool, RequestError> {
    Ok(truthy(v))
}

fn opt<T>(
    raw: &RawSamplingParams,
    key: SamplingKey,
    f: impl FnOnce(SamplingKey, &Value) -> Result<T, RequestError>,
) -> Result<Option<T>, RequestError> {
    raw.non_null(key).map(|v| f(key, v)).transpose()
}

/// A value `SamplingParams` holds as Python holds it: `None` where 0.5.3 kept an explicit `null` (its plain
/// `__init__` stores every argument as given); from 0.5.15, `__post_init__` turns `null` into the default.
fn held<T>(
    raw: &RawSamplingParams,
    key: SamplingKey,
    version: SglangVersion,
    f: impl FnOnce(SamplingKey, &Value) -> Result<T, RequestError>,
    default: T,
) -> Result<Option<T>, RequestError> {
    match raw.get(key) {
        None => Ok(Some(default)),
        Some(Value::Null) if version.null_sampling_values == NullSamplingValues::Kept => Ok(None),
        Some(Value::Null) => Ok(Some(default)),
        Some(v) => f(key, v).map(Some),
    }
}

/// A flag: 0.5.3 keeps a `null`, which Python reads as false; from 0.5.15 `null` is the default.
fn flag(
    raw: &RawSamplingParams,
    key: SamplingKey,
    version: SglangVersion,
    default: bool,
) -> Result<bool, RequestError> {
    Ok(held(raw, key, version, bool_value, default)?.unwrap_or(false))
}

/// The `TypeError` Python raises when a comparison meets a `None`: `'<=' not supported between instances of
/// 'float' and 'NoneType'` (`left` and `right` are the operands' type names, `None` is `NoneType`).
fn compared<T>(value: Option<T>, op: &str, left: &str, right: &str) -> Result<T, RequestError> {
    value.ok_or_else(|| {
        RequestError::internal(format!(
            "TypeError: '{op}' not supported between instances of '{left}' and '{right}'"
        ))
    })
}

/// `SamplingParams(**d)` then `verify(vocab_size)`, with SGLang's messages; an unknown key or a wrong type is
/// the uncaught `TypeError` (HTTP 500) it is in SGLang.
pub fn resolve_sampling_params(
    raw: &RawSamplingParams,
    vocab_size: u32,
    prompt_len: usize,
    config: &ServerConfig,
) -> Result<ResolvedSampling, RequestError> {
    let version = config.sglang_version;
    let mut typed = Typed::read(raw, version)?;
    typed.post_init()?;
    let stop_regex = typed.normalize(version)?;
    let checked = typed.verify(vocab_size, version)?;
    Ok(typed.resolve(checked, stop_regex, vocab_size, prompt_len, config))
}

/// The values `verify` has compared, none of them `None`.
struct Checked {
    temperature: f64,
    top_p: f64,
    top_k: i64,
    min_p: f64,
    min_new_tokens: i64,
}

/// The sampling parameters with Python's types, as `SamplingParams.__init__` stores them; `None` is a
/// `null` that 0.5.3 keeps and that fails the first comparison it meets.
struct Typed {
    /// `None` is no limit but the context window (`init_req_max_new_tokens` reads it as `1 << 30`).
    max_new_tokens: Option<PyNum>,
    temperature: Option<PyNum>,
    top_p: Option<PyNum>,
    /// A `top_k` of another type is the `TypeError` it meets at `verify`'s first comparison of it: `__init__`
    /// keeps any value, and greedy sampling replaces it with 1 before then (`__post_init__`), so it waits.
    top_k: Result<Option<PyNum>, RequestError>,
    min_p: Option<PyNum>,
    frequency_penalty: Option<PyNum>,
    presence_penalty: Option<PyNum>,
    repetition_penalty: Option<PyNum>,
    min_new_tokens: Option<PyNum>,
    beam_width: Option<i64>,
    /// Whether `watermark` asks for watermarking (0.5.23), after `normalize_watermark_request`.
    watermark: Option<Watermark>,
    ignore_eos: bool,
    skip_special_tokens: bool,
    no_stop_trim: bool,
    stream_interval: Option<i64>,
    sampling_seed: Seed,
    stop: Vec<String>,
    /// `stop_regex` as a list (a string is one pattern, a dict its keys), not yet compiled.
    stop_regex: Vec<String>,
    stop_token_ids: Vec<i64>,
    /// The keys of `logit_bias`, checked against the vocabulary by `verify`.
    logit_bias: Option<Vec<String>>,
    /// How many grammar constraints are set: `json_schema`, `regex` and `ebnf`, and from 0.5.23
    /// `structural_tag`.
    grammars: usize,
    /// Any of the four is set, the test of `process_req_with_grammar` in every release.
    constrained: bool,
    return_top_p_token_ids: bool,
}

impl Typed {
    /// `SamplingParams(**d)`: every key typed, or the `TypeError` of the first that is not.
    #[expect(
        clippy::wildcard_enum_match_arm,
        reason = "a JSON value's type check: any other JSON type is the refusal"
    )]
    fn read(raw: &RawSamplingParams, version: SglangVersion) -> Result<Typed, RequestError> {
        let unknown = raw.unknown_key.as_deref().or_else(|| {
            raw.entries
                .iter()
                .find(|(key, _)| !key.in_release(version))
                .map(|(key, _)| key.name())
        });
        if let Some(key) = unknown {
            return Err(RequestError::internal(format!(
                "TypeError: SamplingParams.__init__() got an unexpected keyword argument {}",
                str_repr(key)
            )));
        }
        use SamplingKey as K;
        let max_new_tokens = match raw.get(K::MaxNewTokens) {
            None => Some(PyNum::Int(i64::from(DEFAULT_MAX_NEW_TOKENS))),
            Some(Value::Null) => None,
            Some(v) => Some(int_num(K::MaxNewTokens, v)?),
        };
        let num = |key, default| held(raw, key, version, num_value, PyNum::Float(default));
        let temperature = num(K::Temperature, 1.0)?;
        let top_p = num(K::TopP, 1.0)?;
        let top_k = held(raw, K::TopK, version, int_num, PyNum::Int(-1));
        let min_p = num(K::MinP, 0.0)?;
        let frequency_penalty = num(K::FrequencyPenalty, 0.0)?;
        let presence_penalty = num(K::PresencePenalty, 0.0)?;
        let repetition_penalty = num(K::RepetitionPenalty, 1.0)?;
        let min_new_tokens = held(raw, K::MinNewTokens, version, int_num, PyNum::Int(0))?;
        let beam_width = opt(raw, K::BeamWidth, int_value)?;
        let watermark = raw
            .non_null(K::Watermark)
            .map(Watermark::normalize)
            .transpose()?;
        let ignore_eos = flag(raw, K::IgnoreEos, version, false)?;
        let skip_special_tokens = flag(raw, K::SkipSpecialTokens, version, true)?;
        flag(raw, K::SpacesBetweenSpecialTokens, version, true)?;
        let no_stop_trim = flag(raw, K::NoStopTrim, version, false)?;
        let stream_interval = opt(raw, K::StreamInterval, int_value)?;
        let sampling_seed = Seed::read(raw);
        let stop =
            opt(raw, K::Stop, |key, v| str_or_str_list(key, v, version))?.unwrap_or_default();
        let stop_regex = opt(raw, K::StopRegex, stop_patterns)?.unwrap_or_default();
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
        // The toy model has no grammar backend: a constrained item is refused by the scheduler, never served
        // unconstrained (`GRAMMAR_BACKEND_NONE`).
        let constrained = [K::JsonSchema, K::Regex, K::Ebnf, K::StructuralTag]
            .iter()
            .any(|k| raw.non_null(*k).is_some());
        let grammar_keys: &[SamplingKey] = if version.structural_tag {
            &[K::JsonSchema, K::Regex, K::Ebnf, K::StructuralTag]
        } else {
            &[K::JsonSchema, K::Regex, K::Ebnf]
        };
        let grammars = grammar_keys
            .iter()
            .filter(|k| raw.non_null(**k).is_some())
            .count();
        // `isinstance(custom_params, dict) and custom_params.get("return_top_p_token_ids", False)`, then `bool()`.
        let return_top_p_token_ids = match raw.get(K::CustomParams) {
            Some(Value::Object(map)) => map.get("return_top_p_token_ids").is_some_and(truthy),
            _ => false,
        };
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
            beam_width,
            watermark,
            ignore_eos,
            skip_special_tokens,
            no_stop_trim,
            stream_interval,
            sampling_seed,
            stop,
            stop_regex,
            stop_token_ids,
            logit_bias,
            grammars,
            constrained,
            return_top_p_token_ids,
        })
    }

    /// `__post_init__` (0.5.3: the end of `__init__`): near-zero temperature is greedy. A `None` temperature
    /// fails its first comparison, `0 <= None`.
    fn post_init(&mut self) -> Result<(), RequestError> {
        let t = compared(self.temperature, "<=", "int", "NoneType")?.as_f64();
        if (0.0..SAMPLING_EPS).contains(&t) {
            self.temperature = Some(PyNum::Float(1.0));
            self.top_k = Ok(Some(PyNum::Int(1)));
        }
        Ok(())
    }

    /// `normalize`'s checks of the stop conditions, in its order: the bounds on `stop` and `stop_regex` (0.5.23),
    /// then each pattern's length and its parse (`get_max_seq_length`), whose `re.error` escapes uncaught.
    fn normalize(&self, version: SglangVersion) -> Result<Vec<StopRegex>, RequestError> {
        if version.stop_bounds && self.stop.len() > MAX_STOP_COUNT {
            return Err(RequestError::value(format!(
                "at most {MAX_STOP_COUNT} stop strings are allowed, got {}",
                self.stop.len()
            )));
        }
        if version.stop_bounds && self.stop_regex.len() > MAX_STOP_REGEX_COUNT {
            return Err(RequestError::value(format!(
                "at most {MAX_STOP_REGEX_COUNT} stop_regex patterns are allowed, got {}",
                self.stop_regex.len()
            )));
        }
        self.stop_regex
            .iter()
            .map(|pattern| {
                if version.stop_bounds && pattern.len() > MAX_STOP_REGEX_BYTES {
                    return Err(RequestError::value(format!(
                        "stop_regex is {} bytes, over the {MAX_STOP_REGEX_BYTES}-byte limit",
                        pattern.len()
                    )));
                }
                StopRegex::compile(pattern).map_err(RequestError::internal)
            })
            .collect()
    }

    /// `verify`, in SGLang's order and wording; a `None` fails the comparison that first reads it.
    fn verify(&self, vocab_size: u32, version: SglangVersion) -> Result<Checked, RequestError> {
        if let Some(beam_width) = self.beam_width {
            if beam_width < 1 {
                return Err(RequestError::value(format!(
                    "beam_width must be at least 1, got {beam_width}."
                )));
            }
            if beam_width > 1 {
                return Err(RequestError::value(
                    "beam search (beam_width > 1) is not emulated by sglang-mock",
                ));
            }
        }
        let float_none = |v: Option<PyNum>, op| compared(v, op, "float", "NoneType");
        // `post_init` has failed on a `None` temperature.
        let temperature = float_none(self.temperature, "<")?;
        let t = temperature.as_f64();
        match version.verify {
            Verify::NonNegative if t < 0.0 => {
                return Err(RequestError::value(format!(
                    "temperature must be non-negative, got {temperature}."
                )));
            }
            Verify::NonNegative => {}
            Verify::Finite if !t.is_finite() || t < 0.0 => {
                return Err(RequestError::value(format!(
                    "temperature must be a non-negative finite number, got {temperature}."
                )));
            }
            Verify::Finite => {}
        }
        let top_p = float_none(self.top_p, "<")?;
        let p = top_p.as_f64();
        if !(p > 0.0 && p <= 1.0) {
            return Err(RequestError::value(format!(
                "top_p must be in (0, 1], got {top_p}."
            )));
        }
        let min_p = float_none(self.min_p, "<=")?;
        if !(0.0..=1.0).contains(&min_p.as_f64()) {
            return Err(RequestError::value(format!(
                "min_p must be in [0, 1], got {min_p}."
            )));
        }
        let top_k_held = compared(self.top_k.clone()?, "<", "NoneType", "int")?;
        let top_k = top_k_held.as_int();
        if top_k < 1 && top_k != -1 {
            return Err(RequestError::value(format!(
                "top_k must be -1 (disable) or at least 1, got {top_k_held}."
            )));
        }
        let frequency_penalty = float_none(self.frequency_penalty, "<=")?;
        if !(-2.0..=2.0).contains(&frequency_penalty.as_f64()) {
            return Err(RequestError::value(format!(
                "frequency_penalty must be in [-2, 2], got {frequency_penalty}."
            )));
        }
        let presence_penalty = float_none(self.presence_penalty, "<=")?;
        if !(-2.0..=2.0).contains(&presence_penalty.as_f64()) {
            return Err(RequestError::value(format!(
                "presence_penalty must be in [-2, 2], got {presence_penalty}."
            )));
        }
        let repetition_penalty = float_none(self.repetition_penalty, "<=")?;
        let rp = repetition_penalty.as_f64();
        match version.verify {
            Verify::NonNegative if !(0.0..=2.0).contains(&rp) => {
                return Err(RequestError::value(format!(
                    "repetition_penalty must be in [0, 2], got {repetition_penalty}."
                )));
            }
            Verify::NonNegative => {}
            Verify::Finite if !(rp > 0.0 && rp <= 2.0) => {
                return Err(RequestError::value(format!(
                    "repetition_penalty must be in (0, 2] (1.0 = no penalty), got {repetition_penalty}."
                )));
            }
            Verify::Finite => {}
        }
        let min_new_held = compared(self.min_new_tokens, "<=", "int", "NoneType")?;
        let min_new_tokens = min_new_held.as_int();
        if min_new_tokens < 0 {
            return Err(RequestError::value(format!(
                "min_new_tokens must be in [0, max_new_tokens], got {min_new_held}."
            )));
        }
        if let Some(max_held) = self.max_new_tokens {
            let max_new = max_held.as_int();
            if max_new < 0 {
                return Err(RequestError::value(format!(
                    "max_new_tokens must be at least 0, got {max_held}."
                )));
            }
            if min_new_tokens > max_new {
                return Err(RequestError::value(format!(
                    "min_new_tokens must be in [0, max_new_tokens({max_held})], got {min_new_held}."
                )));
            }
        }
        if let Some(keys) = &self.logit_bias {
            verify_logit_bias(keys, vocab_size)?;
        }
        self.sampling_seed.verify(version)?;
        if self.grammars > 1 {
            return Err(RequestError::value(if version.structural_tag {
                "Only one of json_schema, regex, ebnf, or structural_tag can be set."
            } else {
                "Only one of regex, json_schema, or ebnf can be set."
            }));
        }
        // `_validate_watermark_request`, after `verify`.
        if let Some(watermark) = &self.watermark {
            watermark.resolve()?;
        }
        Ok(Checked {
            temperature: t,
            top_p: p,
            top_k,
            min_p: min_p.as_f64(),
            min_new_tokens,
        })
    }

    /// The engine's parameters: the completion capped at the context window, top-k off when it covers the
    /// vocabulary, stop ids outside the vocabulary dropped.
    fn resolve(
        self,
        checked: Checked,
        stop_regex: Vec<StopRegex>,
        vocab_size: u32,
        prompt_len: usize,
        config: &ServerConfig,
    ) -> ResolvedSampling {
        // The scheduler caps the completion at the context window and the KV pool: `max_req_len - len(prompt) - 1`
        // with `max_req_len = min(context_len - 1, max_total_num_tokens - 1)` (`TpModelWorker`,
        // `Scheduler.init_req_max_new_tokens`).
        let cap = max_req_len(config).saturating_sub(prompt_len as u64 + 1);
        let max_new_tokens = self
            .max_new_tokens
            .map_or(u64::MAX, |max_new| max_new.as_int() as u64)
            .min(cap)
            .min(u64::from(u32::MAX)) as u32;
        // `FINISH_LENGTH(length=max_new_tokens)` holds the value as given: a float stays a float unless the
        // window capped it.
        let length_as_float =
            matches!(self.max_new_tokens, Some(PyNum::Float(f)) if f == f64::from(max_new_tokens));
        let vocab = u64::from(vocab_size);
        let Checked {
            temperature,
            top_p,
            top_k,
            min_p,
            min_new_tokens,
        } = checked;
        let params = SamplingParams {
            max_new_tokens,
            min_new_tokens: (min_new_tokens as u64).min(u64::from(max_new_tokens)) as u32,
            temperature,
            top_p,
            top_k: if top_k == -1 || top_k as u64 >= vocab {
                None
            } else {
                Some(top_k as u32)
            },
            min_p,
            stop: self.stop.into_iter().collect(),
            stop_regex,
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
            finish_order: config.sglang_version.finish_order,
        };
        ResolvedSampling {
            params,
            normalized_top_k: if top_k == -1 { 1 << 30 } else { top_k },
            return_top_p_token_ids: self.return_top_p_token_ids,
            length_as_float,
            constrained: self.constrained,
            stream_interval: self
                .stream_interval
                .map(|si| si.clamp(0, i64::from(u32::MAX)) as u32),
        }
    }
}

/// A request's `watermark` (0.5.23, `sampling/watermarking/core.py`), on a server without
/// `--enable-watermark`, whose context window is the default 4.
#[derive(Debug, Clone, Copy)]
struct Watermark {
    enabled: Option<bool>,
    has_key: bool,
    context_window: Option<i64>,
}

impl Watermark {
    /// The server's `watermark_context_window` (`arg_groups/fields/exec_.py`).
    const SERVER_CONTEXT_WINDOW: i64 = 4;

    /// `normalize_watermark_request`, which `SamplingParams.__post_init__` runs: an object of `enabled`, a hex
    /// `key` and a positive `context_window`.
    fn normalize(value: &Value) -> Result<Watermark, RequestError> {
        let Value::Object(map) = value else {
            return Err(RequestError::value("watermark must be an object"));
        };
        if map
            .keys()
            .any(|k| !matches!(k.as_str(), "enabled" | "key" | "context_window"))
        {
            return Err(RequestError::value("watermark contains unknown fields"));
        }
        let present = |k: &str| map.get(k).filter(|v| !v.is_null());
        let enabled = match present("enabled") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(RequestError::value("watermark enabled must be a boolean")),
        };
        if let Some(key) = present("key") {
            // `parse_watermark_key` in `watermarking/config.py`.
            let Value::String(key) = key else {
                return Err(RequestError::value("watermark key must be a hex string"));
            };
            let digits = match key.get(..2) {
                Some(prefix) if prefix.eq_ignore_ascii_case("0x") => &key[2..],
                _ => key.as_str(),
            };
            if !(1..=16).contains(&digits.chars().count()) {
                return Err(RequestError::value(
                    "watermark key must contain 1 to 16 hex digits",
                ));
            }
            if !digits.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(RequestError::value(
                    "watermark key must contain only hex digits",
                ));
            }
        }
        let context_window = match present("context_window") {
            None => None,
            Some(Value::Number(n)) if n.as_i64().is_some_and(|w| w >= 1) => n.as_i64(),
            Some(_) => {
                return Err(RequestError::value(
                    "watermark context_window must be a positive integer",
                ));
            }
        };
        Ok(Watermark {
            enabled,
            has_key: present("key").is_some(),
            context_window,
        })
    }

    /// `resolve_watermark_request`, which `_validate_watermark_request` runs after `verify`: a request that
    /// asks for watermarking is refused, since the server does not enable it.
    fn resolve(self) -> Result<(), RequestError> {
        if self
            .context_window
            .is_some_and(|w| w > Self::SERVER_CONTEXT_WINDOW)
        {
            return Err(RequestError::value(
                "request watermark context_window cannot exceed the server's watermark context_window",
            ));
        }
        match (self.enabled, self.has_key) {
            (Some(false), true) => Err(RequestError::value(
                "request watermark key cannot be combined with enabled=false",
            )),
            (Some(false), false) => Ok(()),
            (Some(true), _) | (None, true) => Err(RequestError::value(
                "request watermarking requires the server to enable --enable-watermark",
            )),
            (None, false) => Err(RequestError::value(
                "request watermark must set enabled or key",
            )),
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
    fn verify(&self, version: SglangVersion) -> Result<(), RequestError> {
        let out_of_range = |v: &dyn std::fmt::Display| {
            Err(RequestError::value(format!(
                "sampling_seed must be in [-2**63, 2**63 - 1], got {v}."
            )))
        };
        match (version.sampling_seed, self) {
            (SeedRule::FortyTwo, Seed::Null) => {
                Err(RequestError::value("sampling_seed should not be None"))
            }
            (SeedRule::InI64, Seed::Int(v)) if i64::try_from(*v).is_err() => out_of_range(v),
            (SeedRule::InI64, Seed::Big(literal)) => out_of_range(literal),
            (SeedRule::FortyTwo | SeedRule::Unchecked | SeedRule::InI64, _) => Ok(()),
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

/// What the Hugging Face tokenizer raises for a stop "string" that is not one: `SamplingParams.normalize` encodes
/// each stop string (the running 0.5.15 answers `"stop": [1]` with it, a 400).
const NOT_TEXT: &str = "text input must be of type `str` (single example), `list[str]` (batch or single \
pretokenized example) or `list[list[str]]` (batch of pretokenized examples) or `list[tuple[list[str], list[str]]]` \
(batch of pretokenized sequence pairs).";

/// `stop_regex` as `normalize` iterates it: a string is one pattern, a list or a dict (its keys) several. Anything
/// else, or an item that is not a string, fails in Python's `len` or `re` (an uncaught `TypeError` or
/// `AttributeError`).
fn stop_patterns(key: SamplingKey, v: &Value) -> Result<Vec<String>, RequestError> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Object(map) => Ok(map.keys().cloned().collect()),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                Value::Null
                | Value::Bool(_)
                | Value::Number(_)
                | Value::Array(_)
                | Value::Object(_) => Err(type_error(key, "a list of str", item)),
            })
            .collect(),
        Value::Null | Value::Bool(_) | Value::Number(_) => {
            Err(type_error(key, "a str or a list of str", v))
        }
    }
}

/// `stop` as `SamplingParams` iterates it: a string is one stop string; a list's strings are stop strings (a
/// list of strings, a pretokenized input to the tokenizer, can match no text); a dict's keys are; any other
/// element is the tokenizer's `ValueError`; a number or a bool is not iterable (`TypeError`, a 500).
fn str_or_str_list(
    key: SamplingKey,
    v: &Value,
    version: SglangVersion,
) -> Result<Vec<String>, RequestError> {
    let not_iterable = |kind: &str| {
        RequestError::internal(format!(
            "TypeError: '{kind}' object is not iterable (sampling_params.{})",
            key.name()
        ))
    };
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Object(map) => Ok(map.keys().cloned().collect()),
        Value::Array(items) => {
            let mut stop = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::String(s) => stop.push(s.clone()),
                    Value::Array(words) if words.iter().all(Value::is_string) => {}
                    Value::Null
                    | Value::Bool(_)
                    | Value::Number(_)
                    | Value::Array(_)
                    | Value::Object(_) => {
                        return Err(match version.non_text_stop {
                            NonTextStop::ValueError => RequestError::value(NOT_TEXT),
                            NonTextStop::Uncaught => RequestError::internal(NOT_TEXT),
                        });
                    }
                }
            }
            Ok(stop)
        }
        Value::Bool(_) => Err(not_iterable("bool")),
        Value::Number(n) if n.is_f64() => Err(not_iterable("float")),
        Value::Number(_) => Err(not_iterable("int")),
        Value::Null => Ok(Vec::new()),
    }
}

/// `stop_token_ids` as `set(stop_token_ids)` holds it: the ids a token can equal (an int, a bool, a float
/// that holds an integer: `1 == 1.0` in Python); anything else (a string, `None`, a list) is kept by Python and
/// never equals a token, so it stops nothing (the running 0.5.15 answers `"1"` and `[1.5]`). A string is its
/// characters and a dict its keys: none is an id. A number or a bool is not iterable (`TypeError`, a 500).
fn int_list(key: SamplingKey, v: &Value) -> Result<Vec<i64>, RequestError> {
    let id = |item: &Value| match item {
        Value::Bool(b) => Some(i64::from(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Some(i),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(f as i64),
            _ => None,
        },
        Value::Null | Value::String(_) | Value::Array(_) | Value::Object(_) => None,
    };
    match v {
        Value::Array(items) => Ok(items.iter().filter_map(id).collect()),
        Value::String(_) | Value::Object(_) | Value::Null => Ok(Vec::new()),
        Value::Bool(_) | Value::Number(_) => Err(RequestError::internal(format!(
            "TypeError: '{}' object is not iterable (sampling_params.{})",
            if v.is_boolean() { "bool" } else { "int" },
            key.name()
        ))),
    }
}

/// `logit_bias` keys are token ids as strings, inside the vocabulary.
fn verify_logit_bias(keys: &[String], vocab_size: u32) -> Result<(), RequestError> {
    for key in keys {
        match key.trim().parse::<i64>() {
            Ok(id) if (0..i64::from(vocab_size)).contains(&id) => {}
            Ok(_) => {
                return Err(RequestError::value(format!(
                    "logit_bias must has keys in [0, {}], got {key}.",
                    vocab_size - 1
                )));
            }
            Err(_) => {
                return Err(RequestError::value(format!(
                    "invalid literal for int() with base 10: {}",
                    str_repr(key)
                )));
            }
        }
    }
    Ok(())
}

/// The longest a request may be, prompt and completion: `max_req_len = min(context_len - 1,
/// max_total_num_tokens - 1)` (`TpModelWorker`); its prompt must be shorter than `max_req_len - 5`.
pub(crate) fn max_req_len(config: &ServerConfig) -> u64 {
    (u64::from(config.context_len()).saturating_sub(1))
        .min(config.kv_pool_tokens().saturating_sub(1))
}
