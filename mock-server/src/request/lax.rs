//! Python's lax types as Pydantic reads them, decoded straight from the bytes: one-or-many fields, nested id
//! lists, `bool` and `int` with Python's coercions, and the raw sampling-parameter dict with its keys.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

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

impl KeyStr<'_> {
    pub(super) fn as_str(&self) -> &str {
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
pub(super) struct IgnoredPresent;

impl<'de> de::Deserialize<'de> for IgnoredPresent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| IgnoredPresent)
    }
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
pub(super) struct PyInt(pub(super) i64);

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
