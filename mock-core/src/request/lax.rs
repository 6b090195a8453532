//! Python's lax types as Pydantic reads them, decoded straight from the bytes: one-or-many fields, nested id
//! lists, `bool` and `int` with Python's coercions, and the raw sampling-parameter dict with its keys.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::SglangVersion;

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
    /// The literal of a `sampling_seed` that is an integer beyond `u64`, which a [`Value`] holds only as the
    /// nearest float; Python keeps every digit.
    pub big_seed: Option<String>,
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
    BeamWidth => "beam_width",
    Watermark => "watermark",
}

impl SamplingKey {
    /// Whether `release`'s `SamplingParams` takes this keyword: `stop_regex` arrived in 0.5.15, `beam_width`
    /// and `watermark` in 0.5.23 (each release's `sampling/sampling_params.py`).
    pub fn in_release(self, release: SglangVersion) -> bool {
        match self {
            SamplingKey::StopRegex => release.stop_regex,
            SamplingKey::BeamWidth | SamplingKey::Watermark => release.beam_width_and_watermark,
            SamplingKey::MaxNewTokens
            | SamplingKey::Stop
            | SamplingKey::StopTokenIds
            | SamplingKey::Temperature
            | SamplingKey::TopP
            | SamplingKey::TopK
            | SamplingKey::MinP
            | SamplingKey::FrequencyPenalty
            | SamplingKey::PresencePenalty
            | SamplingKey::RepetitionPenalty
            | SamplingKey::MinNewTokens
            | SamplingKey::N
            | SamplingKey::JsonSchema
            | SamplingKey::Regex
            | SamplingKey::Ebnf
            | SamplingKey::StructuralTag
            | SamplingKey::IgnoreEos
            | SamplingKey::SkipSpecialTokens
            | SamplingKey::SpacesBetweenSpecialTokens
            | SamplingKey::NoStopTrim
            | SamplingKey::CustomParams
            | SamplingKey::StreamInterval
            | SamplingKey::LogitBias
            | SamplingKey::SamplingSeed => true,
        }
    }
}

impl RawSamplingParams {
    pub(super) fn get(&self, key: SamplingKey) -> Option<&Value> {
        self.entries
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    /// The value of `key` unless absent or `null`.
    pub(super) fn non_null(&self, key: SamplingKey) -> Option<&Value> {
        self.get(key).filter(|v| !v.is_null())
    }
}

/// A map key, borrowed when the JSON has no escapes in it.
pub(super) enum KeyStr<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl<'a> KeyStr<'a> {
    pub(super) fn as_str(&self) -> &str {
        match self {
            KeyStr::Borrowed(s) => s,
            KeyStr::Owned(s) => s,
        }
    }

    pub(super) fn into_cow(self) -> std::borrow::Cow<'a, str> {
        match self {
            KeyStr::Borrowed(s) => std::borrow::Cow::Borrowed(s),
            KeyStr::Owned(s) => std::borrow::Cow::Owned(s),
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
pub(super) struct IgnoredPresent;

impl<'de> de::Deserialize<'de> for IgnoredPresent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| IgnoredPresent)
    }
}

/// A JSON value read as a Pydantic lax-mode `int` field reads it ([`PyInt`]): `"3"` and `3.0` are 3; `None`
/// where Pydantic refuses the value.
pub fn pydantic_int(value: &serde_json::Value) -> Option<i64> {
    <PyInt as de::Deserialize>::deserialize(value)
        .ok()
        .map(|n| n.0)
}

/// A JSON value read as a Pydantic lax-mode `bool` field reads it ([`PyBool`]); `None` where Pydantic
/// refuses the value.
pub fn pydantic_bool(value: &serde_json::Value) -> Option<bool> {
    <PyBool as de::Deserialize>::deserialize(value)
        .ok()
        .map(|b| b.0)
}

/// A Pydantic lax-mode bool: `true`/`false`, `0`/`1`, and the strings Pydantic accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PyBool(pub(super) bool);

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
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<PyBool, E> {
                if v == 0.0 {
                    Ok(PyBool(false))
                } else if v == 1.0 {
                    Ok(PyBool(true))
                } else {
                    Err(E::invalid_value(de::Unexpected::Float(v), &self))
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

/// An `Optional[str]` element of a one-or-many field: a string or `null`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NullableStr(pub(super) Option<String>);

impl<'de> de::Deserialize<'de> for NullableStr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = NullableStr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NullableStr, E> {
                Ok(NullableStr(Some(v.to_owned())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<NullableStr, E> {
                Ok(NullableStr(None))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `ReturnHiddenStatesMode` of 0.5.23 (`Union[bool, Literal["last"]]`, `srt/managers/schedule_batch.py`):
/// a lax bool, or `"last"` (`.1`); either way hidden states are asked for unless it is false. Earlier
/// releases type the field `bool` and refuse `"last"` ([`super::admit_generate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HiddenStatesMode(pub(super) bool, pub(super) bool);

impl<'de> de::Deserialize<'de> for HiddenStatesMode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        if value == "last" {
            return Ok(HiddenStatesMode(true, true));
        }
        PyBool::deserialize(value)
            .map(|b| HiddenStatesMode(b.0, false))
            .map_err(de::Error::custom)
    }
}

/// A Pydantic lax-mode int (pydantic-core's `int` validator in lax mode): a JSON integer of any size, a float
/// with no fractional part inside the i64 range, `true`/`false`, and a string Python's `int()` reads (with
/// surrounding whitespace, a sign and single underscores) or such digits followed by `.` and zeros.
/// Python's ints are unbounded; the mock's are i64, so an integer beyond that range saturates (every check
/// after the parse then refuses it as too large, as SGLang's would).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PyInt(pub(super) i64);

impl PyInt {
    fn from_str(v: &str) -> Option<PyInt> {
        let t = v.trim();
        let (negative, digits) = match t.as_bytes().first()? {
            b'-' => (true, &t[1..]),
            b'+' => (false, &t[1..]),
            _ => (false, t),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if digits.contains('.') && (fraction.is_empty() || fraction.bytes().any(|b| b != b'0')) {
            return None;
        }
        let bytes = whole.as_bytes();
        let well_formed = !bytes.is_empty()
            && bytes.first().is_some_and(u8::is_ascii_digit)
            && bytes.last().is_some_and(u8::is_ascii_digit)
            && bytes.iter().all(|b| b.is_ascii_digit() || *b == b'_')
            && !whole.contains("__");
        if !well_formed {
            return None;
        }
        let magnitude: u128 = whole
            .bytes()
            .filter(u8::is_ascii_digit)
            .try_fold(0u128, |acc, b| {
                Some(acc.saturating_mul(10).saturating_add(u128::from(b - b'0')))
            })?;
        Some(PyInt(if negative {
            i64::try_from(magnitude).map_or(i64::MIN, |m| -m)
        } else {
            i64::try_from(magnitude).unwrap_or(i64::MAX)
        }))
    }
}

impl<'de> de::Deserialize<'de> for PyInt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = PyInt;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a valid integer")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<PyInt, E> {
                Ok(PyInt(i64::from(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PyInt, E> {
                Ok(PyInt(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PyInt, E> {
                Ok(PyInt(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<PyInt, E> {
                // pydantic-core refuses floats beyond i64 ("exceeded maximum size").
                if v.fract() == 0.0 && (-(2f64.powi(63))..2f64.powi(63)).contains(&v) {
                    Ok(PyInt(v as i64))
                } else {
                    Err(E::invalid_value(de::Unexpected::Float(v), &self))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PyInt, E> {
                PyInt::from_str(v).ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
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

/// An element of an id list, as the field's validator reads it.
pub(super) trait IdElement: for<'de> de::Deserialize<'de> {
    fn id(self) -> i64;
}

/// An `input_ids` element under `validate_optional_list_i64_1d_2d` (`srt/utils/field_validators.py`, the
/// `PlainValidator` of 0.5.15 and 0.5.23): what `array("q", ...)` takes, a Python `int` in i64 range, and a
/// `bool` is one.
struct StrictId(i64);

impl IdElement for StrictId {
    fn id(self) -> i64 {
        self.0
    }
}

impl<'de> de::Deserialize<'de> for StrictId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = StrictId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a valid integer")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<StrictId, E> {
                Ok(StrictId(i64::from(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<StrictId, E> {
                Ok(StrictId(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StrictId, E> {
                i64::try_from(v)
                    .map(StrictId)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl IdElement for PyInt {
    fn id(self) -> i64 {
        self.0
    }
}

/// One element of an id list: an id, or (for the nested form) a list of ids.
enum IdOrList {
    Id(i64),
    List(Vec<i64>),
}

/// [`IdOrList`] read with the element type `E`.
struct IdOrListOf<E>(IdOrList, std::marker::PhantomData<E>);

impl<'de, E: IdElement> de::Deserialize<'de> for IdOrListOf<E> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<E>(std::marker::PhantomData<E>);
        macro_rules! scalar {
            ($($method:ident($ty:ty)),*) => {$(
                fn $method<Er: de::Error>(self, v: $ty) -> Result<Self::Value, Er> {
                    let id = E::deserialize(de::IntoDeserializer::<Er>::into_deserializer(v))?.id();
                    Ok(IdOrListOf(IdOrList::Id(id), std::marker::PhantomData))
                }
            )*};
        }
        impl<'de, E: IdElement> Visitor<'de> for V<E> {
            type Value = IdOrListOf<E>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a valid integer or a list of integers")
            }
            scalar!(
                visit_bool(bool),
                visit_i64(i64),
                visit_u64(u64),
                visit_f64(f64)
            );
            fn visit_str<Er: de::Error>(self, v: &str) -> Result<Self::Value, Er> {
                let id = E::deserialize(de::value::StrDeserializer::<Er>::new(v))?.id();
                Ok(IdOrListOf(IdOrList::Id(id), std::marker::PhantomData))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Ok(IdOrListOf(
                    IdOrList::List(collect_ids::<E, A>(seq)?),
                    std::marker::PhantomData,
                ))
            }
        }
        deserializer.deserialize_any(V(std::marker::PhantomData))
    }
}

fn collect_ids<'de, E: IdElement, A: SeqAccess<'de>>(mut seq: A) -> Result<Vec<i64>, A::Error> {
    let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
    while let Some(id) = seq.next_element::<E>()? {
        out.push(id.id());
    }
    Ok(out)
}

/// An id list read with the element type `E`: flat, or a list of flat lists.
fn deserialize_ids<'de, E: IdElement, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Ids, D::Error> {
    struct V<E>(std::marker::PhantomData<E>);
    impl<'de, E: IdElement> Visitor<'de> for V<E> {
        type Value = Ids;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of integers or a list of lists of integers")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ids, A::Error> {
            let first = match seq.next_element::<IdOrListOf<E>>()? {
                None => return Ok(Ids::Flat(Vec::new())),
                Some(first) => first.0,
            };
            let cap = seq.size_hint().unwrap_or(0).min(1 << 16) + 1;
            match first {
                IdOrList::Id(id) => {
                    let mut out = Vec::with_capacity(cap);
                    out.push(id);
                    while let Some(id) = seq.next_element::<E>()? {
                        out.push(id.id());
                    }
                    Ok(Ids::Flat(out))
                }
                IdOrList::List(list) => {
                    let mut out = Vec::with_capacity(cap);
                    out.push(list);
                    while let Some(NestedIds::<E>(list, _)) = seq.next_element()? {
                        out.push(list);
                    }
                    Ok(Ids::Nested(out))
                }
            }
        }
    }
    deserializer.deserialize_seq(V::<E>(std::marker::PhantomData))
}

/// `input_ids`: ids as `validate_optional_list_i64_1d_2d` admits them.
impl<'de> de::Deserialize<'de> for Ids {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_ids::<StrictId, D>(deserializer)
    }
}

/// `token_ids_logprob`: a plain `Union[List[List[int]], List[int]]`, so Pydantic's lax ints.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LaxIds(pub(super) Ids);

impl<'de> de::Deserialize<'de> for LaxIds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_ids::<PyInt, D>(deserializer).map(LaxIds)
    }
}

/// An inner list of a nested id list.
struct NestedIds<E>(Vec<i64>, std::marker::PhantomData<E>);

impl<'de, E: IdElement> de::Deserialize<'de> for NestedIds<E> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<E>(std::marker::PhantomData<E>);
        impl<'de, E: IdElement> Visitor<'de> for V<E> {
            type Value = NestedIds<E>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of integers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<NestedIds<E>, A::Error> {
                Ok(NestedIds(
                    collect_ids::<E, A>(seq)?,
                    std::marker::PhantomData,
                ))
            }
        }
        deserializer.deserialize_seq(V(std::marker::PhantomData))
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
                        SamplingInput::Many(_) | SamplingInput::Other => other = true,
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
            Some(SamplingKey::SamplingSeed) => {
                let literal: Box<RawValue> = map.next_value()?;
                let value: Value =
                    serde_json::from_str(literal.get()).map_err(de::Error::custom)?;
                raw.big_seed = (value.is_f64() && is_integer_literal(literal.get()))
                    .then(|| literal.get().to_owned());
                raw.entries.push((SamplingKey::SamplingSeed, value));
            }
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

/// Whether a JSON number's text is an integer: no fraction and no exponent.
pub(super) fn is_integer_literal(text: &str) -> bool {
    !text.contains(['.', 'e', 'E'])
}
