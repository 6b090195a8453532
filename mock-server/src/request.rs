//! Typed parsing of a `/generate` body (`GenerateReqInput`) and SGLang's normalisation and validation of it,
//! ending in one engine [`ItemRequest`] per flattened sample.
//!
//! The order of the checks follows SGLang: Pydantic type validation (400 `{"object":"error",...}`), then
//! `GenerateReqInput.normalize_batch_and_arguments` (400 `{"error":{"message"}}`), then per item the tokenizer
//! manager's checks and `SamplingParams(**d).verify()`, then the scheduler's `logprob_start_len` check, which
//! aborts only that item.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::config::{Profile, ServerConfig};
use crate::engine::{ItemRequest, SamplingParams};
use crate::error::ApiError;
use crate::model::Tokenizer;
use crate::pyfmt::{PyNum, int_list_repr, str_list_repr, str_repr};

/// `temperature` below this is greedy sampling (`_SAMPLING_EPS` in `sampling_params.py`).
const SAMPLING_EPS: f64 = 1e-6;
/// The most samples (prompts times `n`) one request may expand to (a mock-only limit).
pub const MAX_SAMPLES: usize = 1 << 16;
/// The most top-logprob and token-id-logprob entries one item may ask for (a mock-only limit).
pub const MAX_LOGPROB_ENTRIES: u64 = 20_000_000;
/// SGLang's default `max_new_tokens`.
pub const DEFAULT_MAX_NEW_TOKENS: u32 = 128;

// ---------------------------------------------------------------------------------------------------------
// Raw, typed request body.
// ---------------------------------------------------------------------------------------------------------

/// A field that is either one value or a list of them (`str | list[str]`, `bool | list[bool]`, ...).
#[derive(Debug, Clone, PartialEq)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    /// Convert the value(s) inside.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> OneOrMany<U> {
        match self {
            OneOrMany::One(v) => OneOrMany::One(f(v)),
            OneOrMany::Many(vs) => OneOrMany::Many(vs.into_iter().map(f).collect()),
        }
    }
}

/// `input_ids` or `token_ids_logprob`: a flat list of ints or a list of such lists.
#[derive(Debug, Clone, PartialEq)]
pub enum Ids {
    Flat(Vec<i64>),
    Nested(Vec<Vec<i64>>),
}

/// `sampling_params` as sent: SGLang types it `Any`, so anything other than a dict or a list of dicts
/// only fails later, with an uncaught exception (HTTP 500).
#[derive(Debug, Clone, PartialEq)]
pub enum SamplingInput {
    One(RawSamplingParams),
    Many(Vec<RawSamplingParams>),
    Other,
}

/// One `sampling_params` dict, key by key. Values stay loosely typed because SGLang only checks them when it
/// constructs `SamplingParams`, and a wrong type there is an uncaught `TypeError` (HTTP 500), not a 400.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawSamplingParams {
    /// Known keys with their values, in body order (a repeated key keeps its last value, as in Python).
    pub entries: Vec<(SamplingKey, Value)>,
    /// The first key `SamplingParams.__init__` does not accept.
    pub unknown_key: Option<String>,
}

macro_rules! sampling_keys {
    ($($variant:ident => $name:literal,)*) => {
        /// Every keyword argument of SGLang's `SamplingParams`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum SamplingKey { $($variant,)* }

        impl SamplingKey {
            pub fn from_name(name: &str) -> Option<SamplingKey> {
                match name { $($name => Some(SamplingKey::$variant),)* _ => None }
            }

            pub fn name(self) -> &'static str {
                match self { $(SamplingKey::$variant => $name,)* }
            }
        }
    };
}

sampling_keys! {
    MaxNewTokens => "max_new_tokens",
    Stop => "stop",
    StopTokenIds => "stop_token_ids",
    StopRegex => "stop_regex",
    Temperature => "temperature",
    TopP => "top_p",
    TopK => "top_k",
    MinP => "min_p",
    FrequencyPenalty => "frequency_penalty",
    PresencePenalty => "presence_penalty",
    RepetitionPenalty => "repetition_penalty",
    MinNewTokens => "min_new_tokens",
    N => "n",
    JsonSchema => "json_schema",
    Regex => "regex",
    Ebnf => "ebnf",
    StructuralTag => "structural_tag",
    IgnoreEos => "ignore_eos",
    SkipSpecialTokens => "skip_special_tokens",
    SpacesBetweenSpecialTokens => "spaces_between_special_tokens",
    NoStopTrim => "no_stop_trim",
    CustomParams => "custom_params",
    StreamInterval => "stream_interval",
    LogitBias => "logit_bias",
    SamplingSeed => "sampling_seed",
}

impl RawSamplingParams {
    fn get(&self, key: SamplingKey) -> Option<&Value> {
        self.entries
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    /// The value of `key` unless absent or `null`.
    fn non_null(&self, key: SamplingKey) -> Option<&Value> {
        self.get(key).filter(|v| !v.is_null())
    }
}

/// The fields of `GenerateReqInput` the mock acts on. Every field is optional; `null` equals absent;
/// unknown keys are skipped without being materialised.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerateReqInput {
    pub text: Option<OneOrMany<String>>,
    pub input_ids: Option<Ids>,
    pub has_input_embeds: bool,
    pub sampling_params: Option<SamplingInput>,
    pub rid: Option<OneOrMany<String>>,
    pub return_logprob: Option<OneOrMany<bool>>,
    pub logprob_start_len: Option<OneOrMany<i64>>,
    pub top_logprobs_num: Option<OneOrMany<i64>>,
    pub token_ids_logprob: Option<Ids>,
    pub return_text_in_logprobs: bool,
    pub stream: bool,
    pub return_hidden_states: bool,
    pub has_lora_path: bool,
    pub custom_logit_processor: Option<CustomLogitProcessor>,
    pub data_parallel_rank: Option<i64>,
    pub routed_dp_rank: Option<i64>,
}

/// Only whether it was a list matters: a list with `n > 1` is its own error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustomLogitProcessor {
    One,
    Many,
}

/// A Pydantic-style type error in the body: which field, what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldError {
    field: &'static str,
    kind: &'static str,
    msg: String,
}

/// Parse a `/generate` body. Syntax and type errors are Pydantic validation errors (HTTP 400 in the
/// `{"object":"error",...}` shape); nothing is validated semantically here.
pub fn parse_generate(body: &[u8]) -> Result<GenerateReqInput, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(validation_error("missing", "()", "Field required"));
    }
    let mut field_error = None;
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = BodySeed {
        field_error: &mut field_error,
    }
    .deserialize(&mut de)
    .and_then(|req| de.end().map(|()| req));
    match parsed {
        Ok(req) => Ok(req),
        Err(err) => Err(match field_error {
            // A syntax error inside a field's value is still a JSON decode error.
            Some(fe) if err.is_data() => {
                validation_error(fe.kind, &format!("'{}'", fe.field), &fe.msg)
            }
            _ if err.is_data() => validation_error(
                "model_attributes_type",
                "()",
                &format!(
                    "Input should be a valid dictionary or object to extract fields from ({err})"
                ),
            ),
            _ => ApiError::Validation(json_decode_message(&err)),
        }),
    }
}

pub(crate) fn validation_error(kind: &str, field_loc: &str, msg: &str) -> ApiError {
    let loc = if field_loc == "()" {
        "('body',)".to_owned()
    } else {
        format!("('body', {field_loc})")
    };
    let err = format!(
        "{{'type': '{kind}', 'loc': {loc}, 'msg': {}}}",
        str_repr(msg)
    );
    ApiError::Validation(format!("1 validation error:\n  {err}\n [{err}]"))
}

pub(crate) fn json_decode_message(err: &serde_json::Error) -> String {
    let err_text = format!("{err}");
    let e = format!(
        "{{'type': 'json_invalid', 'loc': ('body', {}), 'msg': 'JSON decode error', 'input': {{}}, 'ctx': {{'error': {}}}}}",
        err.column(),
        str_repr(&err_text)
    );
    format!("1 validation error:\n  {e}\n [{e}]")
}

struct BodySeed<'a> {
    field_error: &'a mut Option<FieldError>,
}

impl<'de> DeserializeSeed<'de> for BodySeed<'_> {
    type Value = GenerateReqInput;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BodySeed<'_> {
    type Value = GenerateReqInput;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut req = GenerateReqInput::default();
        while let Some(key) = map.next_key::<KeyStr<'de>>()? {
            // Wrap each known field's parse so a type error names the field.
            macro_rules! field {
                ($name:literal, $ty:ty, $kind:literal) => {
                    match map.next_value::<$ty>() {
                        Ok(v) => v,
                        Err(e) => {
                            *self.field_error = Some(FieldError {
                                field: $name,
                                kind: $kind,
                                msg: strip_position(&e.to_string()),
                            });
                            return Err(e);
                        }
                    }
                };
            }
            match key.as_str() {
                "text" => req.text = field!("text", Option<OneOrMany<String>>, "string_type"),
                "input_ids" => req.input_ids = field!("input_ids", Option<Ids>, "list_type"),
                "input_embeds" => {
                    req.has_input_embeds =
                        field!("input_embeds", Option<IgnoredPresent>, "list_type").is_some()
                }
                "sampling_params" => {
                    req.sampling_params =
                        field!("sampling_params", Option<SamplingInput>, "dict_type")
                }
                "rid" => req.rid = field!("rid", Option<OneOrMany<String>>, "string_type"),
                "return_logprob" => {
                    req.return_logprob =
                        field!("return_logprob", Option<OneOrMany<PyBool>>, "bool_type")
                            .map(|v| v.map(|b| b.0))
                }
                "logprob_start_len" => {
                    req.logprob_start_len =
                        field!("logprob_start_len", Option<OneOrMany<PyInt>>, "int_type")
                            .map(|v| v.map(|i| i.0))
                }
                "top_logprobs_num" => {
                    req.top_logprobs_num =
                        field!("top_logprobs_num", Option<OneOrMany<PyInt>>, "int_type")
                            .map(|v| v.map(|i| i.0))
                }
                "token_ids_logprob" => {
                    req.token_ids_logprob = field!("token_ids_logprob", Option<Ids>, "list_type")
                }
                "return_text_in_logprobs" => {
                    req.return_text_in_logprobs =
                        field!("return_text_in_logprobs", Option<PyBool>, "bool_type")
                            .is_some_and(|b| b.0)
                }
                "stream" => {
                    req.stream = field!("stream", Option<PyBool>, "bool_type").is_some_and(|b| b.0)
                }
                "return_hidden_states" => {
                    req.return_hidden_states = match field!(
                        "return_hidden_states",
                        Option<OneOrMany<PyBool>>,
                        "bool_type"
                    ) {
                        None => false,
                        Some(OneOrMany::One(b)) => b.0,
                        Some(OneOrMany::Many(v)) => v.iter().any(|b| b.0),
                    }
                }
                "lora_path" => {
                    req.has_lora_path =
                        field!("lora_path", Option<IgnoredPresent>, "string_type").is_some()
                }
                "custom_logit_processor" => {
                    req.custom_logit_processor = field!(
                        "custom_logit_processor",
                        Option<OneOrMany<String>>,
                        "string_type"
                    )
                    .map(|v| match v {
                        OneOrMany::One(_) => CustomLogitProcessor::One,
                        OneOrMany::Many(_) => CustomLogitProcessor::Many,
                    })
                }
                "data_parallel_rank" => {
                    req.data_parallel_rank =
                        field!("data_parallel_rank", Option<PyInt>, "int_type").map(|i| i.0)
                }
                "routed_dp_rank" => {
                    req.routed_dp_rank =
                        field!("routed_dp_rank", Option<PyInt>, "int_type").map(|i| i.0)
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(req)
    }
}

/// serde_json appends " at line L column C"; Pydantic messages have no position.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg.to_owned(),
    }
}

/// A map key, borrowed when the JSON has no escapes in it.
enum KeyStr<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl KeyStr<'_> {
    fn as_str(&self) -> &str {
        match self {
            KeyStr::Borrowed(s) => s,
            KeyStr::Owned(s) => s,
        }
    }
}

impl<'de> de::Deserialize<'de> for KeyStr<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(KeyStr::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(KeyStr::Owned(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(KeyStr::Owned(v))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// Any JSON value, skipped: only its presence counts.
struct IgnoredPresent;

impl<'de> de::Deserialize<'de> for IgnoredPresent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| IgnoredPresent)
    }
}

/// A Pydantic lax-mode bool: `true`/`false`, `0`/`1`, and the strings Pydantic accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PyBool(bool);

impl<'de> de::Deserialize<'de> for PyBool {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = PyBool;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a valid boolean")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<PyBool, E> {
                Ok(PyBool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PyBool, E> {
                match v {
                    0 => Ok(PyBool(false)),
                    1 => Ok(PyBool(true)),
                    _ => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PyBool, E> {
                match v {
                    0 => Ok(PyBool(false)),
                    1 => Ok(PyBool(true)),
                    _ => Err(E::invalid_value(de::Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PyBool, E> {
                match v.to_ascii_lowercase().as_str() {
                    "true" | "t" | "yes" | "y" | "on" | "1" => Ok(PyBool(true)),
                    "false" | "f" | "no" | "n" | "off" | "0" => Ok(PyBool(false)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A Pydantic lax-mode int: JSON integers in i64 range and floats with no fractional part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PyInt(i64);

impl<'de> de::Deserialize<'de> for PyInt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = PyInt;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a valid integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PyInt, E> {
                Ok(PyInt(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PyInt, E> {
                i64::try_from(v)
                    .map(PyInt)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<PyInt, E> {
                if v.fract() == 0.0 && v.abs() < 9.0e15 {
                    Ok(PyInt(v as i64))
                } else {
                    Err(E::invalid_value(de::Unexpected::Float(v), &self))
                }
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl<'de, T: de::Deserialize<'de>> de::Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Decide by the JSON type without buffering: a sequence is `Many`, anything else is handed to `T`.
        struct V<T>(std::marker::PhantomData<T>);
        macro_rules! forward {
            ($($method:ident($ty:ty)),*) => {$(
                fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
                    T::deserialize(de::IntoDeserializer::<E>::into_deserializer(v)).map(OneOrMany::One)
                }
            )*};
        }
        impl<'de, T: de::Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value or a list of values")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(item) = seq.next_element()? {
                    out.push(item);
                }
                Ok(OneOrMany::Many(out))
            }
            forward!(
                visit_bool(bool),
                visit_i64(i64),
                visit_u64(u64),
                visit_f64(f64),
                visit_string(String)
            );
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                T::deserialize(de::value::StrDeserializer::<E>::new(v)).map(OneOrMany::One)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(OneOrMany::One)
            }
        }
        deserializer.deserialize_any(V(std::marker::PhantomData))
    }
}

/// One element of an id list: an int, or (for the nested form) a list of ints.
enum IdOrList {
    Id(i64),
    List(Vec<i64>),
}

impl<'de> de::Deserialize<'de> for IdOrList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IdOrList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a valid integer or a list of integers")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IdOrList, E> {
                Ok(IdOrList::Id(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IdOrList, E> {
                i64::try_from(v)
                    .map(IdOrList::Id)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IdOrList, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(PyStrictInt(id)) = seq.next_element()? {
                    out.push(id);
                }
                Ok(IdOrList::List(out))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A token id: a JSON integer in i64 range.
struct PyStrictInt(i64);

impl<'de> de::Deserialize<'de> for PyStrictInt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = PyStrictInt;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a valid integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PyStrictInt, E> {
                Ok(PyStrictInt(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PyStrictInt, E> {
                i64::try_from(v)
                    .map(PyStrictInt)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl<'de> de::Deserialize<'de> for Ids {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ids;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of integers or a list of lists of integers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ids, A::Error> {
                let first = match seq.next_element::<IdOrList>()? {
                    None => return Ok(Ids::Flat(Vec::new())),
                    Some(first) => first,
                };
                let cap = seq.size_hint().unwrap_or(0).min(1 << 16) + 1;
                match first {
                    IdOrList::Id(id) => {
                        let mut out = Vec::with_capacity(cap);
                        out.push(id);
                        while let Some(PyStrictInt(id)) = seq.next_element()? {
                            out.push(id);
                        }
                        Ok(Ids::Flat(out))
                    }
                    IdOrList::List(list) => {
                        let mut out = Vec::with_capacity(cap);
                        out.push(list);
                        while let Some(NestedIds(list)) = seq.next_element()? {
                            out.push(list);
                        }
                        Ok(Ids::Nested(out))
                    }
                }
            }
        }
        deserializer.deserialize_seq(V)
    }
}

/// An inner list of a nested id list.
struct NestedIds(Vec<i64>);

impl<'de> de::Deserialize<'de> for NestedIds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NestedIds;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of integers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NestedIds, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(PyStrictInt(id)) = seq.next_element()? {
                    out.push(id);
                }
                Ok(NestedIds(out))
            }
        }
        deserializer.deserialize_seq(V)
    }
}

impl<'de> de::Deserialize<'de> for SamplingInput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SamplingInput;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a dict or a list of dicts")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SamplingInput, A::Error> {
                visit_sampling_map(map).map(SamplingInput::One)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SamplingInput, A::Error> {
                let mut out = Vec::new();
                let mut other = false;
                while let Some(item) = seq.next_element::<SamplingInput>()? {
                    match item {
                        SamplingInput::One(p) => out.push(p),
                        _ => other = true,
                    }
                }
                Ok(if other {
                    SamplingInput::Other
                } else {
                    SamplingInput::Many(out)
                })
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<SamplingInput, E> {
                Ok(SamplingInput::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<SamplingInput, E> {
                Ok(SamplingInput::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<SamplingInput, E> {
                Ok(SamplingInput::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<SamplingInput, E> {
                Ok(SamplingInput::Other)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<SamplingInput, E> {
                Ok(SamplingInput::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<SamplingInput, E> {
                Ok(SamplingInput::Other)
            }
        }
        deserializer.deserialize_any(V)
    }
}

fn visit_sampling_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<RawSamplingParams, A::Error> {
    let mut raw = RawSamplingParams::default();
    while let Some(key) = map.next_key::<KeyStr<'de>>()? {
        match SamplingKey::from_name(key.as_str()) {
            Some(k) => {
                // Sampling values are few and small; keeping them loose lets a wrong type become the
                // 500 SGLang gives instead of a 400.
                let value: Value = map.next_value()?;
                raw.entries.push((k, value));
            }
            None => {
                map.next_value::<IgnoredAny>()?;
                if raw.unknown_key.is_none() {
                    raw.unknown_key = Some(key.as_str().to_owned());
                }
            }
        }
    }
    Ok(raw)
}

// ---------------------------------------------------------------------------------------------------------
// Normalisation and validation into engine requests.
// ---------------------------------------------------------------------------------------------------------

/// One flattened sample, ready for the engine.
#[derive(Debug, Clone)]
pub struct PlannedItem {
    /// `meta_info.id`.
    pub rid: String,
    /// The id was generated (uuid4 hex) rather than given by the caller.
    pub rid_is_fresh: bool,
    pub request: ItemRequest,
    /// Whether `input_top_logprobs`/`output_top_logprobs` are reported (`top_logprobs_num > 0`).
    pub top_logprobs_num: usize,
    /// Whether `input_token_ids_logprobs`/`output_token_ids_logprobs` are reported.
    pub token_ids_logprob_requested: bool,
    /// Chunk cadence of this item's stream.
    pub stream_interval: u32,
    /// The scheduler rejected this item (`logprob_start_len` too large): it finishes at once with an
    /// abort carrying this message and status 400.
    pub abort: Option<String>,
}

/// A validated `/generate` request.
#[derive(Debug, Clone)]
pub struct GeneratePlan {
    /// The response is a JSON array (batch input or `n > 1`), not one object.
    pub is_batch: bool,
    pub stream: bool,
    pub return_text_in_logprobs: bool,
    /// Prompt-major: `[p0s0, p0s1, ..., p1s0, ...]`.
    pub items: Vec<PlannedItem>,
}

/// Where fresh request ids come from: uuid4 hex on the server, something reproducible in the oracle.
pub trait RidSource {
    fn fresh_rid(&mut self) -> String;
}

/// Turn a parsed body into engine requests, applying SGLang's normalisation and every validation rule.
pub fn plan_generate(
    req: &GenerateReqInput,
    config: &ServerConfig,
    tokenizer: &Tokenizer,
    rids: &mut dyn RidSource,
) -> Result<GeneratePlan, ApiError> {
    // `_validate_inputs`.
    let given = [
        req.text.is_some(),
        req.input_ids.is_some(),
        req.has_input_embeds,
    ];
    if given.iter().all(|g| !g) || given.iter().all(|g| *g) {
        return Err(ApiError::value(
            "Either text, input_ids or input_embeds should be provided.",
        ));
    }

    // `_determine_batch_size`: `text` decides when given, then `input_ids`.
    let (single_prompt, batch_size) = match (&req.text, &req.input_ids) {
        (Some(OneOrMany::One(_)), _) => (true, 1),
        (Some(OneOrMany::Many(texts)), _) => (false, texts.len()),
        (None, Some(Ids::Flat(ids))) if ids.is_empty() => {
            return Err(ApiError::value("input_ids cannot be empty."));
        }
        (None, Some(Ids::Flat(_))) => (true, 1),
        (None, Some(Ids::Nested(lists))) => (false, lists.len()),
        (None, None) => (true, 1),
    };

    // `_handle_parallel_sampling`.
    let n = parallel_sample_num(req.sampling_params.as_ref())?;
    // A single prompt with `n > 1` becomes a batch of one prompt.
    let is_single = single_prompt && n == 1;

    let num = if is_single {
        1
    } else {
        batch_size.saturating_mul(n)
    };
    // SGLang has no such limit; the mock refuses requests that would exhaust its memory before they start.
    if num > MAX_SAMPLES {
        return Err(ApiError::value(format!(
            "The request expands to {num} samples ({batch_size} prompts x n={n}); the mock accepts at most \
             {MAX_SAMPLES}."
        )));
    }

    // Per-item prompts, sampling dicts and logprob settings, expanded to `num`.
    let sampling: Vec<&RawSamplingParams> =
        expand_sampling(req.sampling_params.as_ref(), is_single, batch_size, num)?;
    let item_rids: Vec<Option<String>> =
        expand_rids(req.rid.as_ref(), is_single, batch_size, n, num)?;
    let return_logprob = expand_param(
        req.return_logprob.as_ref(),
        false,
        "return_logprob",
        is_single,
        n,
        num,
    )?;
    let logprob_start_len = expand_param(
        req.logprob_start_len.as_ref(),
        -1,
        "logprob_start_len",
        is_single,
        n,
        num,
    )?;
    let top_logprobs_num = expand_param(
        req.top_logprobs_num.as_ref(),
        0,
        "top_logprobs_num",
        is_single,
        n,
        num,
    )?;
    let token_ids_logprob = expand_token_ids(req.token_ids_logprob.as_ref(), is_single, n, num)?;
    if !is_single && n > 1 && req.custom_logit_processor == Some(CustomLogitProcessor::Many) {
        return Err(ApiError::value(
            "Cannot use list custom_logit_processor with parallel_sample_num > 1",
        ));
    }

    // `_validate_rid_uniqueness`.
    if let Some(OneOrMany::Many(list)) = &req.rid
        && !is_single
    {
        // `[rid for rid, count in Counter(rids).items() if count > 1]`: first-occurrence order.
        let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for rid in list {
            *counts.entry(rid.as_str()).or_default() += 1;
        }
        let mut dups: Vec<&str> = Vec::new();
        for rid in list {
            if counts.get(rid.as_str()).is_some_and(|&c| c > 1) && !dups.contains(&rid.as_str()) {
                dups.push(rid);
            }
        }
        if !dups.is_empty() {
            return Err(ApiError::value(format!(
                "Duplicate request IDs detected within the request: {}",
                str_list_repr(dups)
            )));
        }
    }

    let dp_rank = req.routed_dp_rank.or(req.data_parallel_rank);

    // Tokenizer-manager and sampling-parameter checks, item by item; prompts are tokenized once per prompt.
    let mut items = Vec::with_capacity(num);
    let mut prompt_cache: Vec<Option<Vec<u32>>> = vec![None; batch_size.max(1)];
    for i in 0..num {
        let prompt_index = if is_single { 0 } else { i / n };
        let input_ids = match &prompt_cache[prompt_index] {
            Some(ids) => ids.clone(),
            None => {
                let ids = prompt_ids(req, single_prompt, prompt_index, config, tokenizer)?;
                prompt_cache[prompt_index] = Some(ids.clone());
                ids
            }
        };
        let raw = sampling[i];
        validate_one_request(req, raw, &input_ids, config, dp_rank)?;
        let token_ids = token_ids_logprob[i].clone();
        validate_token_ids_logprob(token_ids.as_ref(), config.vocab_size)?;
        let resolved = resolve_sampling_params(raw, config.vocab_size, input_ids.len(), config)?;

        let (rid, rid_is_fresh) = match &item_rids[i] {
            Some(rid) => (rid.clone(), false),
            None => (rids.fresh_rid(), true),
        };
        let want_logprob = return_logprob[i];
        let prompt_len = input_ids.len();
        let mut abort = None;
        let logprob_start = if want_logprob {
            let start = logprob_start_len[i];
            if start >= 0 {
                let start = start as u64;
                if start >= prompt_len as u64 {
                    abort = Some(format!(
                        "req.logprob_start_len={start} is higher than the number of input tokens \
                         len(req.origin_input_ids)={prompt_len}. Please use a smaller logprob_start_len."
                    ));
                    prompt_len.saturating_sub(1)
                } else {
                    start as usize
                }
            } else {
                default_logprob_start(config.profile, prompt_len)
            }
        } else {
            prompt_len
        };
        let k = if want_logprob {
            top_logprobs_num[i].clamp(0, i64::from(config.vocab_size)) as usize
        } else {
            0
        };
        let ids: Vec<u32> = match (&token_ids, want_logprob) {
            (Some(ids), true) => ids.iter().map(|&id| id as u32).collect(),
            _ => Vec::new(),
        };
        // SGLang has no such limit, but a body of billions of triples would exhaust the mock's memory.
        let positions = (prompt_len - logprob_start.min(prompt_len)) as u64
            + u64::from(resolved.params.max_new_tokens);
        let entries = positions.saturating_mul((k + ids.len()) as u64);
        if entries > MAX_LOGPROB_ENTRIES {
            return Err(ApiError::value(format!(
                "top_logprobs_num={k} and {} token_ids_logprob over {positions} positions would return \
                 {entries} logprob entries; the mock refuses more than {MAX_LOGPROB_ENTRIES}.",
                ids.len()
            )));
        }
        let stream_interval = match resolved.stream_interval {
            Some(si) if si > 0 => si,
            _ => config.stream_interval.max(1),
        };
        items.push(PlannedItem {
            rid,
            rid_is_fresh,
            top_logprobs_num: k,
            token_ids_logprob_requested: want_logprob && token_ids.is_some(),
            stream_interval,
            abort,
            request: ItemRequest {
                input_ids,
                params: resolved.params,
                return_logprob: want_logprob,
                logprob_start,
                top_logprobs_num: k,
                token_ids_logprob: ids,
                sample_index: i as u64,
                forced_output: Vec::new(),
            },
        });
    }

    // Scripted answers replace sampling with the rule's tokens (forced decoding keeps the true logprobs).
    crate::script::apply(&config.scripted, tokenizer, &mut items);

    Ok(GeneratePlan {
        is_batch: !is_single,
        stream: req.stream,
        return_text_in_logprobs: req.return_text_in_logprobs,
        items,
    })
}

/// The first covered prompt position for `logprob_start_len = -1`.
pub fn default_logprob_start(profile: Profile, prompt_len: usize) -> usize {
    match profile {
        Profile::Latest => prompt_len,
        Profile::Mid => prompt_len.saturating_sub(1),
    }
}

fn parallel_sample_num(sampling: Option<&SamplingInput>) -> Result<usize, ApiError> {
    let n_of = |raw: &RawSamplingParams| -> Result<i64, ApiError> {
        match raw.non_null(SamplingKey::N) {
            None => Ok(1),
            Some(v) => v.as_i64().ok_or_else(|| {
                ApiError::internal(format!(
                    "TypeError: sampling_params.n must be an int, got {v}"
                ))
            }),
        }
    };
    let n = match sampling {
        None | Some(SamplingInput::Other) => 1,
        Some(SamplingInput::One(raw)) => n_of(raw)?,
        Some(SamplingInput::Many(list)) => {
            let Some(first) = list.first() else {
                return Err(ApiError::internal(
                    "IndexError: sampling_params is an empty list",
                ));
            };
            let n = n_of(first)?;
            for raw in list {
                if n_of(raw)? != n {
                    return Err(ApiError::value(
                        "The parallel_sample_num should be the same for all samples in sample params.",
                    ));
                }
            }
            n
        }
    };
    Ok(n.max(1) as usize)
}

static EMPTY_SAMPLING: RawSamplingParams = RawSamplingParams {
    entries: Vec::new(),
    unknown_key: None,
};

fn expand_sampling(
    sampling: Option<&SamplingInput>,
    is_single: bool,
    batch_size: usize,
    num: usize,
) -> Result<Vec<&RawSamplingParams>, ApiError> {
    match sampling {
        None => Ok(vec![&EMPTY_SAMPLING; num]),
        Some(SamplingInput::One(raw)) => Ok(vec![raw; num]),
        Some(SamplingInput::Many(_)) if is_single => Err(ApiError::internal(
            "TypeError: SamplingParams() argument after ** must be a mapping, not list",
        )),
        Some(SamplingInput::Many(list)) => {
            // `self.sampling_params * parallel_sample_num`, then `obj[i]` for i < batch_size per prompt.
            if list.len() < batch_size {
                return Err(ApiError::internal(format!(
                    "IndexError: {} sampling_params for a batch of {batch_size}",
                    list.len()
                )));
            }
            let n = num / batch_size.max(1);
            Ok((0..num).map(|i| &list[i / n]).collect())
        }
        Some(SamplingInput::Other) => Err(ApiError::internal(
            "TypeError: sampling_params must be a dict or a list of dicts",
        )),
    }
}

fn expand_rids(
    rid: Option<&OneOrMany<String>>,
    is_single: bool,
    batch_size: usize,
    n: usize,
    num: usize,
) -> Result<Vec<Option<String>>, ApiError> {
    if is_single {
        return match rid {
            None => Ok(vec![None]),
            Some(OneOrMany::One(r)) => Ok(vec![Some(r.clone())]),
            Some(OneOrMany::Many(_)) => Err(ApiError::internal(
                "TypeError: unhashable type: 'list' (a list rid for a single request)",
            )),
        };
    }
    match rid {
        Some(OneOrMany::Many(list)) if list.len() != batch_size => Err(ApiError::value(
            "The specified rids length mismatch with the batch_size for batch processing.",
        )),
        // Parallel samples always get fresh ids (`regenerate_rid`), whatever the caller sent.
        _ if n > 1 => Ok(vec![None; num]),
        None => Ok(vec![None; num]),
        Some(OneOrMany::One(r)) => Ok((0..num).map(|i| Some(format!("{r}_{i}"))).collect()),
        Some(OneOrMany::Many(list)) => Ok(list.iter().cloned().map(Some).collect()),
    }
}

fn expand_param<T: Copy>(
    value: Option<&OneOrMany<T>>,
    default: T,
    name: &str,
    is_single: bool,
    n: usize,
    num: usize,
) -> Result<Vec<T>, ApiError> {
    match value {
        None => Ok(vec![default; num]),
        Some(OneOrMany::One(v)) => Ok(vec![*v; num]),
        Some(OneOrMany::Many(_)) if is_single => Err(ApiError::internal(format!(
            "TypeError: a list {name} for a single request"
        ))),
        Some(OneOrMany::Many(_)) if n > 1 => Err(ApiError::value(format!(
            "Cannot use list {name} with parallel_sample_num > 1"
        ))),
        Some(OneOrMany::Many(list)) if list.len() < num => Err(ApiError::internal(format!(
            "IndexError: {} values of {name} for a batch of {num}",
            list.len()
        ))),
        Some(OneOrMany::Many(list)) => Ok(list[..num].to_vec()),
    }
}

fn expand_token_ids(
    value: Option<&Ids>,
    is_single: bool,
    n: usize,
    num: usize,
) -> Result<Vec<Option<Vec<i64>>>, ApiError> {
    match value {
        // `[]` is treated as None.
        None => Ok(vec![None; num]),
        Some(Ids::Flat(ids)) if ids.is_empty() => Ok(vec![None; num]),
        Some(Ids::Flat(ids)) => Ok(vec![Some(ids.clone()); num]),
        Some(Ids::Nested(_)) if is_single => Err(ApiError::value(
            "token_ids_logprob must be a flat list of integers.",
        )),
        Some(Ids::Nested(_)) if n > 1 => Err(ApiError::value(
            "Cannot use list token_ids_logprob with parallel_sample_num > 1",
        )),
        Some(Ids::Nested(lists)) if lists.len() < num => Err(ApiError::internal(format!(
            "IndexError: {} token_ids_logprob lists for a batch of {num}",
            lists.len()
        ))),
        Some(Ids::Nested(lists)) => Ok(lists[..num]
            .iter()
            .map(|l| if l.is_empty() { None } else { Some(l.clone()) })
            .collect()),
    }
}

/// The prompt of one batch position: `input_ids` win over `text`.
fn prompt_ids(
    req: &GenerateReqInput,
    single_prompt: bool,
    index: usize,
    config: &ServerConfig,
    tokenizer: &Tokenizer,
) -> Result<Vec<u32>, ApiError> {
    if req.has_input_embeds && req.text.is_none() && req.input_ids.is_none() {
        return Err(ApiError::value(
            "input_embeds is provided while disable_radix_cache is False. Please add \
             `--disable-radix-cache` when you launch the server if you want to use input_embeds as inputs.",
        ));
    }
    let ids: Option<&[i64]> = match (&req.input_ids, single_prompt) {
        (Some(Ids::Flat(ids)), true) => Some(ids),
        (Some(Ids::Nested(lists)), false) => match lists.get(index) {
            Some(ids) => Some(ids),
            None => {
                return Err(ApiError::internal(format!(
                    "IndexError: no input_ids for batch position {index}"
                )));
            }
        },
        (Some(_), _) => {
            return Err(ApiError::internal(
                "TypeError: the shape of input_ids does not match the batch shape of text",
            ));
        }
        (None, _) => None,
    };
    if let Some(ids) = ids {
        if ids.is_empty() {
            return Err(ApiError::value("input_ids cannot be empty."));
        }
        let vocab = i64::from(config.vocab_size);
        if ids.iter().any(|&id| id < 0 || id >= vocab) {
            return Err(ApiError::value(format!(
                "The input_ids {} contains values greater than the vocab size ({vocab}).",
                int_list_repr(ids)
            )));
        }
        return Ok(ids.iter().map(|&id| id as u32).collect());
    }
    let text: &str = match (&req.text, single_prompt) {
        (Some(OneOrMany::One(t)), _) => t,
        (Some(OneOrMany::Many(texts)), false) => &texts[index],
        (Some(OneOrMany::Many(_)), true) => {
            return Err(ApiError::value(
                "Text should be a list for batch processing.",
            ));
        }
        (None, _) => {
            return Err(ApiError::value(
                "Either text, input_ids or input_embeds should be provided.",
            ));
        }
    };
    if text.is_empty() {
        return Err(ApiError::value(
            "texts cannot be empty and tokenizer must be initialized",
        ));
    }
    let ids = tokenizer.encode(text);
    if ids.is_empty() {
        return Err(ApiError::value(
            "texts cannot be empty and tokenizer must be initialized",
        ));
    }
    Ok(ids)
}

/// `TokenizerManager._validate_one_request` and the feature gates the mock's server flags leave closed.
fn validate_one_request(
    req: &GenerateReqInput,
    raw: &RawSamplingParams,
    input_ids: &[u32],
    config: &ServerConfig,
    dp_rank: Option<i64>,
) -> Result<(), ApiError> {
    let context = u64::from(config.context_length);
    let input_len = input_ids.len() as u64;
    if input_len >= context {
        return Err(ApiError::value(format!(
            "The input ({input_len} tokens) is longer than the model's context length ({context} tokens)."
        )));
    }
    if let Some(v) = raw.non_null(SamplingKey::MaxNewTokens) {
        let max_new = int_value(SamplingKey::MaxNewTokens, v)?;
        let total = i128::from(max_new) + i128::from(input_len);
        if total > i128::from(context) {
            return Err(ApiError::value(format!(
                "Requested token count exceeds the model's maximum context length of {context} tokens. \
                 You requested a total of {total} tokens: {input_len} tokens from the input messages and \
                 {max_new} tokens for the completion. Please reduce the number of tokens in the input \
                 messages or the completion to fit within the limit."
            )));
        }
    }
    if req.return_hidden_states {
        return Err(ApiError::value(
            "The server is not configured to return the hidden states. Please set \
             `--enable-return-hidden-states` to enable this feature.",
        ));
    }
    if req.has_lora_path {
        return Err(ApiError::value(
            "LoRA is not enabled. Please set `--enable-lora` to enable LoRA.",
        ));
    }
    if req.custom_logit_processor.is_some() {
        return Err(ApiError::value(
            "The server is not configured to enable custom logit processor. Please set \
             `--enable-custom-logit-processor` to enable this feature.",
        ));
    }
    if let Some(rank) = dp_rank
        && rank != 0
    {
        return Err(ApiError::value(format!(
            "routed_dp_rank={rank} is out of range [0, 1)."
        )));
    }
    Ok(())
}

fn validate_token_ids_logprob(ids: Option<&Vec<i64>>, vocab_size: u32) -> Result<(), ApiError> {
    let vocab = i64::from(vocab_size);
    if let Some(ids) = ids
        && let Some(bad) = ids.iter().find(|&&id| id < 0 || id >= vocab)
    {
        return Err(ApiError::value(format!(
            "token_ids_logprob contains out-of-vocabulary token id {bad}; valid range is [0, {vocab})."
        )));
    }
    Ok(())
}

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

fn int_value(key: SamplingKey, v: &Value) -> Result<i64, ApiError> {
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
