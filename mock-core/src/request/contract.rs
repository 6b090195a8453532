//! SGLang 0.5.23's JSON contract gate for `/generate`: the judgment of `GenerateRequest.from_json_value` in
//! `sglang/api/v1/api_types.py` (generated from SGLang's proto files), which `generate_request` in
//! `srt/entrypoints/http_server.py` runs through `api_contract.generate_contract_error` after FastAPI's parse
//! and answers with HTTP 400 `{"error": <text>}`.
//!
//! This is a transcription of the generated decoder, not a schema of our own: the same fields, the same
//! `null`-means-default rules, the same first-violation order (Python's `dict` order: a repeated key keeps its
//! first position and its last value) and serde's error texts that the decoder reproduces. The cross-check in
//! `tests/python/contract_check.py` runs the wheel's own decoder beside this one over generated bodies.

#![expect(
    clippy::wildcard_enum_match_arm,
    reason = "each check accepts one JSON kind and refuses every other with its own message"
)]

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::lax::{KeyStr, is_integer_literal};
use crate::pyfmt::float_repr;

/// The contract violation in a `/generate` body that FastAPI's parse admitted, or `None`.
///
/// The body is valid JSON here (the parse before rejected anything else); should it not be, the gate has
/// nothing to judge and admits it.
pub fn generate_contract_error(body: &[u8]) -> Option<String> {
    // A body is an object (FastAPI refused anything else), read in one pass; any other value still gets the
    // decoder's judgment.
    let top = match serde_json::from_slice::<PyDict>(body) {
        Ok(dict) => J::Map(dict.0),
        Err(_) => J::of(serde_json::from_slice(body).ok()?)?,
    };
    // An empty text marks a value that did not decode, which cannot happen to valid JSON: admit it.
    decode_generate_request(&top)
        .err()
        .filter(|violation| !violation.is_empty())
}

/// A parsed JSON value as Python's `json.loads` sees it, decoded one level at a time: integers keep their
/// literal (Python's `int` has no range), objects keep Python's key order and last-value rule.
enum J<'a> {
    Null,
    Bool(bool),
    /// A JSON integer literal, any size.
    Int(&'a str),
    Float(f64),
    Str(Cow<'a, str>),
    /// An array, its elements decoded on demand.
    Seq(&'a RawValue),
    Map(Vec<(Cow<'a, str>, &'a RawValue)>),
}

impl<'a> J<'a> {
    fn of(raw: &'a RawValue) -> Option<J<'a>> {
        let text = raw.get();
        Some(match text.as_bytes().first()? {
            b'n' => J::Null,
            b't' => J::Bool(true),
            b'f' => J::Bool(false),
            b'"' => J::Str(match serde_json::from_str::<&str>(text) {
                Ok(s) => Cow::Borrowed(s),
                Err(_) => Cow::Owned(serde_json::from_str::<String>(text).ok()?),
            }),
            b'[' => J::Seq(raw),
            b'{' => J::Map(serde_json::from_str::<PyDict<'a>>(text).ok()?.0),
            // orjson (0.5.23's `request.json()`) reads an integer beyond 64 bits as a float.
            _ if is_integer_literal(text)
                && (text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok()) =>
            {
                J::Int(text)
            }
            _ => J::Float(text.parse().ok()?),
        })
    }

    fn is_number(&self) -> bool {
        matches!(self, J::Int(_) | J::Float(_))
    }
}

/// Decodes one element; a value the parse before admitted always decodes, so a failure admits the body.
fn elem(raw: &RawValue) -> Result<J<'_>, String> {
    J::of(raw).ok_or_else(String::new)
}

/// An object's entries in Python's `dict` order.
struct PyDict<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> de::Deserialize<'de> for PyDict<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PyDict<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PyDict<'de>, A::Error> {
                let mut entries: Vec<(Cow<'de, str>, &'de RawValue)> = Vec::new();
                while let Some(key) = map.next_key::<KeyStr<'de>>()? {
                    let key = key.into_cow();
                    let value: &'de RawValue = map.next_value()?;
                    match entries.iter_mut().find(|(k, _)| *k == key) {
                        Some(entry) => entry.1 = value,
                        None => entries.push((key, value)),
                    }
                }
                Ok(PyDict(entries))
            }
        }
        deserializer.deserialize_map(V)
    }
}

type Check = Result<(), String>;

/// serde's `Unexpected` display, as the decoder's `_unexpected` reproduces it.
fn unexpected(v: &J) -> String {
    match v {
        J::Null => "null".to_owned(),
        J::Bool(b) => format!("boolean `{b}`"),
        J::Int(lit) => format!("integer `{}`", int_text(lit)),
        J::Float(x) => format!("floating point `{}`", float_repr(*x)),
        J::Str(s) => format!("string \"{s}\""),
        J::Seq(_) => "sequence".to_owned(),
        J::Map(_) => "map".to_owned(),
    }
}

/// Python's `str(int)` of a JSON integer literal (`-0` is `0`).
fn int_text(lit: &str) -> &str {
    if lit == "-0" { "0" } else { lit }
}

fn invalid_type(v: &J, expected: &str) -> String {
    format!("invalid type: {}, expected {expected}", unexpected(v))
}

fn expect_bool(v: &J, expected: &str) -> Check {
    match v {
        J::Bool(_) => Ok(()),
        _ => Err(invalid_type(v, expected)),
    }
}

fn expect_int(v: &J, expected: &str) -> Check {
    match v {
        J::Int(_) => Ok(()),
        _ => Err(invalid_type(v, expected)),
    }
}

fn expect_uint(v: &J, expected: &str) -> Check {
    match v {
        J::Int(lit) if lit.starts_with('-') && int_text(lit) != "0" => Err(format!(
            "invalid value: integer `{lit}`, expected {expected}"
        )),
        J::Int(_) => Ok(()),
        _ => Err(invalid_type(v, expected)),
    }
}

fn expect_float(v: &J, expected: &str) -> Check {
    if v.is_number() {
        Ok(())
    } else {
        Err(invalid_type(v, expected))
    }
}

fn expect_str(v: &J, expected: &str) -> Check {
    match v {
        J::Str(_) => Ok(()),
        _ => Err(invalid_type(v, expected)),
    }
}

fn expect_seq<'a>(v: &J<'a>, expected: &str) -> Result<Vec<&'a RawValue>, String> {
    match v {
        J::Seq(raw) => elements(raw),
        _ => Err(invalid_type(v, expected)),
    }
}

/// The elements of an array (valid JSON always splits; a failure admits the body, as [`elem`]'s does).
fn elements(raw: &RawValue) -> Result<Vec<&RawValue>, String> {
    serde_json::from_str(raw.get()).map_err(|_| String::new())
}

/// Whether `v` is an array of JSON integer literals only, `[]` included: read from the bytes, the common
/// case of a token-id list (thousands of ids) costs one scan instead of one decode per element. Anything
/// else (a string, a nested list, a float, `null`) answers `false` and takes the element-by-element path.
fn only_integer_literals(v: &J) -> bool {
    let J::Seq(raw) = v else {
        return false;
    };
    // One pass over `[ ws -? digits ws (, ws -? digits ws)* ]` (valid JSON, so the brackets are there).
    let text = raw.get().as_bytes();
    let mut rest = text[1..text.len() - 1].trim_ascii();
    if rest.is_empty() {
        return true;
    }
    loop {
        rest = rest.strip_prefix(b"-").unwrap_or(rest);
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return false;
        }
        rest = rest[digits..].trim_ascii_start();
        match rest.split_first() {
            None => return true,
            Some((b',', tail)) => rest = tail.trim_ascii_start(),
            Some(_) => return false,
        }
    }
}

type Entries<'v, 'a> = &'v [(Cow<'a, str>, &'a RawValue)];

fn expect_map<'v, 'a>(v: &'v J<'a>, expected: &str) -> Result<Entries<'v, 'a>, String> {
    match v {
        J::Map(entries) => Ok(entries),
        _ => Err(invalid_type(v, expected)),
    }
}

/// serde's `unknown_field` text: the 400 of a struct that rejects unknown keys.
fn unknown_field(key: &str, fields: &[&str]) -> String {
    match fields {
        [] => format!("unknown field `{key}`, there are no fields"),
        [one] => format!("unknown field `{key}`, expected `{one}`"),
        [a, b] => format!("unknown field `{key}`, expected `{a}` or `{b}`"),
        _ => {
            let listed: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
            format!(
                "unknown field `{key}`, expected one of {}",
                listed.join(", ")
            )
        }
    }
}

/// Every element of a list through `check`.
fn each(items: &[&RawValue], mut check: impl FnMut(&J) -> Check) -> Check {
    items.iter().try_for_each(|raw| check(&elem(raw)?))
}

/// A field whose `null` means its default: `None if x is None else decode(x)`.
fn nullable(v: &J, check: impl FnOnce(&J) -> Check) -> Check {
    match v {
        J::Null => Ok(()),
        _ => check(v),
    }
}

/// `_expect_seq(value, "a sequence")` with every element through `check`.
fn seq_of(v: &J, check: impl FnMut(&J) -> Check) -> Check {
    each(&expect_seq(v, "a sequence")?, check)
}

/// `_expect_map(x, "a map")` with every value through `check`.
fn map_of(v: &J, mut check: impl FnMut(&J) -> Check) -> Check {
    expect_map(v, "a map")?
        .iter()
        .try_for_each(|(_, raw)| check(&elem(raw)?))
}

/// The `XOrList` aliases of scalars: a list decodes element by element, anything else as one value of the
/// kind `is_one` accepts. (The error text is built only for a violation: this runs on every request.)
fn scalar_or_list(
    v: &J,
    alias: &str,
    is_one: fn(&J) -> bool,
    element: impl FnMut(&J) -> Check,
) -> Check {
    match v {
        J::Seq(raw) => each(&elements(raw)?, element),
        _ if is_one(v) => Ok(()),
        _ => Err(invalid_type(
            v,
            &format!("a value or an array of values for {alias}"),
        )),
    }
}

fn is_str(v: &J) -> bool {
    matches!(v, J::Str(_))
}

fn is_bool(v: &J) -> bool {
    matches!(v, J::Bool(_))
}

fn is_int(v: &J) -> bool {
    matches!(v, J::Int(_))
}

fn string_or_list(v: &J) -> Check {
    scalar_or_list(v, "StringOrList", is_str, |e| expect_str(e, "a string"))
}

fn bool_or_list(v: &J) -> Check {
    scalar_or_list(v, "BoolOrList", is_bool, |e| expect_bool(e, "a boolean"))
}

fn int64_or_list(v: &J) -> Check {
    scalar_or_list(v, "Int64OrList", is_int, |e| expect_int(e, "i64"))
}

fn optional_string(v: &J) -> Check {
    nullable(v, |v| expect_str(v, "a string"))
}

fn optional_string_or_list(v: &J) -> Check {
    scalar_or_list(v, "OptionalStringOrList", is_str, optional_string)
}

fn optional_int64_or_list(v: &J) -> Check {
    scalar_or_list(v, "OptionalInt64OrList", is_int, |e| {
        nullable(e, |e| expect_int(e, "i64"))
    })
}

fn string_list(v: &J) -> Check {
    seq_of(v, |e| expect_str(e, "a string"))
}

fn token_ids(v: &J) -> Check {
    if only_integer_literals(v) {
        return Ok(());
    }
    seq_of(v, |e| expect_int(e, "i64"))
}

fn int64_list(v: &J) -> Check {
    token_ids(v)
}

/// `TokenIdsOrList` and `StringListOrList`: `[]` and `[scalar, ...]` are one flat list, anything else a batch.
fn flat_or_nested(
    v: &J,
    alias: &str,
    flat_first: impl Fn(&J) -> bool,
    flat: fn(&J) -> Check,
) -> Check {
    match v {
        J::Seq(raw) => {
            let first = elements(raw)?.first().map(|raw| elem(raw)).transpose()?;
            if first.as_ref().is_none_or(&flat_first) {
                flat(v)
            } else {
                seq_of(v, flat)
            }
        }
        _ => Err(invalid_type(
            v,
            &format!("a value or an array of values for {alias}"),
        )),
    }
}

fn token_ids_or_list(v: &J) -> Check {
    if only_integer_literals(v) {
        return Ok(());
    }
    flat_or_nested(v, "TokenIdsOrList", |e| e.is_number(), token_ids)
}

fn string_list_or_list(v: &J) -> Check {
    flat_or_nested(
        v,
        "StringListOrList",
        |e| matches!(e, J::Str(_)),
        string_list,
    )
}

/// A struct decoder's loop: each key in order through `field`, which answers `None` for a key the struct
/// does not have; `deny` lists the struct's fields when it rejects unknown keys.
fn struct_of(
    v: &J,
    name: &str,
    deny: Option<&[&str]>,
    mut field: impl FnMut(&str, &J) -> Option<Check>,
) -> Check {
    let J::Map(entries) = v else {
        return Err(invalid_type(v, &format!("struct {name}")));
    };
    for (key, raw) in entries {
        let x = elem(raw)?;
        match field(key, &x) {
            Some(check) => check?,
            None => {
                if let Some(fields) = deny {
                    return Err(unknown_field(key, fields));
                }
            }
        }
    }
    Ok(())
}

const SAMPLING_PARAMS_FIELDS: &[&str] = &[
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "stream_interval",
    "logit_bias",
    "sampling_seed",
    "custom_params",
    "beam_width",
    "watermark",
    "choice",
];

const WATERMARK_FIELDS: &[&str] = &["enabled", "key", "context_window"];

const MEDIA_REF_FIELDS: &[&str] = &[
    "url",
    "detail",
    "max_dynamic_patch",
    "content_hash",
    "min_pixels",
    "max_pixels",
    "total_max_pixels",
    "fps",
    "num_frames",
    "min_frames",
    "max_frames",
    "max_tokens_per_frame",
    "max_image_tokens",
    "use_audio",
    "image_grid_thw",
];

/// `decode_SamplingParams`.
fn sampling_params(v: &J) -> Check {
    struct_of(
        v,
        "SamplingParams",
        Some(SAMPLING_PARAMS_FIELDS),
        |key, x| {
            let int = |x: &J| nullable(x, |x| expect_int(x, "i64"));
            let float = |x: &J| nullable(x, |x| expect_float(x, "f64"));
            let boolean = |x: &J| nullable(x, |x| expect_bool(x, "a boolean"));
            Some(match key {
                "max_new_tokens" | "top_k" | "min_new_tokens" | "n" | "stream_interval"
                | "sampling_seed" | "beam_width" => int(x),
                "stop" | "stop_regex" => nullable(x, string_or_list),
                "stop_token_ids" => nullable(x, int64_list),
                "temperature" | "top_p" | "min_p" | "frequency_penalty" | "presence_penalty"
                | "repetition_penalty" => float(x),
                "json_schema" | "regex" | "ebnf" | "structural_tag" => optional_string(x),
                "ignore_eos"
                | "skip_special_tokens"
                | "spaces_between_special_tokens"
                | "no_stop_trim" => boolean(x),
                "logit_bias" => nullable(x, |x| map_of(x, |e| expect_float(e, "f64"))),
                "custom_params" => Ok(()),
                "watermark" => nullable(x, watermark),
                "choice" => nullable(x, string_list),
                _ => return None,
            })
        },
    )
}

/// `decode_WatermarkRequestConfig`.
fn watermark(v: &J) -> Check {
    struct_of(
        v,
        "WatermarkRequestConfig",
        Some(WATERMARK_FIELDS),
        |key, x| {
            Some(match key {
                "enabled" => nullable(x, |x| expect_bool(x, "a boolean")),
                "key" => optional_string(x),
                "context_window" => nullable(x, |x| expect_int(x, "i64")),
                _ => return None,
            })
        },
    )
}

/// `decode_SamplingParamsOrList`.
fn sampling_params_or_list(v: &J) -> Check {
    match v {
        J::Seq(raw) => each(&elements(raw)?, sampling_params),
        J::Map(_) => sampling_params(v),
        _ => Err(invalid_type(
            v,
            "a value or an array of values for SamplingParamsOrList",
        )),
    }
}

/// `decode_MediaRef`.
fn media_ref(v: &J) -> Check {
    struct_of(v, "MediaRef", Some(MEDIA_REF_FIELDS), |key, x| {
        Some(match key {
            "url" => expect_str(x, "a string"),
            "detail" | "content_hash" => optional_string(x),
            "max_dynamic_patch"
            | "min_pixels"
            | "max_pixels"
            | "total_max_pixels"
            | "num_frames"
            | "min_frames"
            | "max_frames"
            | "max_tokens_per_frame"
            | "max_image_tokens" => nullable(x, |x| expect_int(x, "i64")),
            "fps" => nullable(x, |x| expect_float(x, "f64")),
            "use_audio" => nullable(x, |x| expect_bool(x, "a boolean")),
            "image_grid_thw" => nullable(x, |x| seq_of(x, int64_list)),
            _ => return None,
        })
    })
}

/// `decode_MediaItem`.
fn media_item(v: &J) -> Check {
    match v {
        J::Str(_) => Ok(()),
        J::Map(_) => media_ref(v),
        _ => Err(invalid_type(v, "one of the MediaItem shapes")),
    }
}

/// `decode_MediaItems`: a list of optional items.
fn media_items(v: &J) -> Check {
    seq_of(v, |e| nullable(e, media_item))
}

/// `decode_MediaInput`: one item, a list of items, or a list of such lists.
fn media_input(v: &J) -> Check {
    match v {
        J::Str(_) | J::Map(_) => media_item(v),
        J::Seq(raw) => {
            let first = elements(raw)?.first().map(|raw| elem(raw)).transpose()?;
            if matches!(first, Some(J::Seq(_))) {
                seq_of(v, |e| nullable(e, media_items))
            } else {
                media_items(v)
            }
        }
        _ => Err(invalid_type(v, "one of the MediaInput shapes")),
    }
}

/// `decode_KvHintAction`; unknown keys are ignored.
fn kv_hint_action(v: &J) -> Check {
    struct_of(v, "KvHintAction", None, |key, x| {
        Some(match key {
            "action_id" | "action_type" | "action_version" => expect_str(x, "a string"),
            "payload" => Ok(()),
            _ => return None,
        })
    })
}

/// `decode_KvHintsEnvelope`; unknown keys are ignored.
fn kv_hints_envelope(v: &J) -> Check {
    struct_of(v, "KvHintsEnvelope", None, |key, x| {
        Some(match key {
            "protocol_version" | "message_id" => expect_str(x, "a string"),
            "actions" => nullable(x, |x| seq_of(x, kv_hint_action)),
            _ => return None,
        })
    })
}

/// `decode_KvHintsEnvelopeOrList`.
fn kv_hints_envelope_or_list(v: &J) -> Check {
    match v {
        J::Seq(raw) => each(&elements(raw)?, |e| nullable(e, kv_hints_envelope)),
        J::Map(_) => kv_hints_envelope(v),
        _ => Err(invalid_type(
            v,
            "a value or an array of values for KvHintsEnvelopeOrList",
        )),
    }
}

/// `decode_ImagesConfig`; unknown keys are ignored.
fn images_config(v: &J) -> Check {
    struct_of(v, "ImagesConfig", None, |key, x| {
        Some(match key {
            "image_mode" => optional_string(x),
            "prefix" => expect_str(x, "a string"),
            _ => return None,
        })
    })
}

/// `decode_GenerateRequest`: unknown top-level keys are ignored.
fn decode_generate_request(v: &J) -> Check {
    struct_of(v, "GenerateRequest", None, |key, x| {
        let boolean = |x: &J| nullable(x, |x| expect_bool(x, "a boolean"));
        let int = |x: &J| nullable(x, |x| expect_int(x, "i64"));
        Some(match key {
            "rid" | "text" | "extra_key" | "cache_salt" => nullable(x, string_or_list),
            "input_ids" | "token_ids_logprob" => nullable(x, token_ids_or_list),
            "stream" | "return_text_in_logprobs" | "require_reasoning" => boolean(x),
            "sampling_params" => nullable(x, sampling_params_or_list),
            "return_logprob" | "return_hidden_states" | "return_sampling_mask" => {
                nullable(x, bool_or_list)
            }
            "logprob_start_len" | "top_logprobs_num" => nullable(x, int64_or_list),
            "bootstrap_host" | "bootstrap_pair_key" | "lora_path" | "custom_logit_processor" => {
                nullable(x, optional_string_or_list)
            }
            "bootstrap_port" | "bootstrap_room" | "decode_tp_size" => {
                nullable(x, optional_int64_or_list)
            }
            "routed_dp_rank" | "disagg_prefill_dp_rank" | "priority" => int(x),
            "image_data" | "video_data" | "audio_data" => nullable(x, media_input),
            "mm_hashes" => nullable(x, string_list_or_list),
            "session_params" => Ok(()),
            "kv_hints" => nullable(x, kv_hints_envelope_or_list),
            "routing_key" | "session_id" => optional_string(x),
            "max_thinking_tokens" => nullable(x, |x| expect_uint(x, "u64")),
            "custom_labels" => nullable(x, |x| map_of(x, |e| expect_str(e, "a string"))),
            "images_config" => nullable(x, images_config),
            // Declared without `Optional`: `null` is a type error.
            "return_prompt_token_ids" => expect_bool(x, "a boolean"),
            "routed_experts_start_len" => expect_int(x, "i64"),
            "modalities" => nullable(x, |x| seq_of(x, optional_string)),
            _ => return None,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::generate_contract_error as gate;

    fn err(body: &str) -> Option<String> {
        gate(body.as_bytes())
    }

    // Expected texts are the decoder's (`api_types.py` of the 0.5.23 wheel) for the same bodies.
    #[test]
    fn a_float_for_an_int_names_the_value_and_the_type() {
        assert_eq!(
            err(r#"{"input_ids":[1],"sampling_params":{"max_new_tokens":4.0}}"#).as_deref(),
            Some("invalid type: floating point `4.0`, expected i64")
        );
        assert_eq!(
            err(r#"{"sampling_params":{"n":1e20}}"#).as_deref(),
            Some("invalid type: floating point `1e+20`, expected i64")
        );
    }

    /// orjson reads an integer beyond 64 bits as a float, which the decoder then names: the running 0.5.23's
    /// texts for `sampling_seed` 2**64 and `max_new_tokens` -2**63 - 1.
    #[test]
    fn an_integer_beyond_64_bits_is_a_float_to_the_decoder() {
        assert_eq!(
            err(r#"{"text":"a","sampling_params":{"sampling_seed":18446744073709551616}}"#)
                .as_deref(),
            Some("invalid type: floating point `1.8446744073709552e+19`, expected i64")
        );
        assert_eq!(
            err(r#"{"text":"a","sampling_params":{"max_new_tokens":-9223372036854775809}}"#)
                .as_deref(),
            Some("invalid type: floating point `-9.223372036854776e+18`, expected i64")
        );
        assert_eq!(
            err(r#"{"text":"a","sampling_params":{"sampling_seed":18446744073709551615}}"#),
            None
        );
    }

    #[test]
    fn an_int_for_a_bool_is_refused_at_the_top_level_too() {
        assert_eq!(
            err(r#"{"text":"a","return_logprob":0}"#).as_deref(),
            Some(
                "invalid type: integer `0`, expected a value or an array of values for BoolOrList"
            )
        );
        assert_eq!(
            err(r#"{"text":"a","stream":1}"#).as_deref(),
            Some("invalid type: integer `1`, expected a boolean")
        );
    }

    #[test]
    fn unknown_sampling_keys_are_refused_and_unknown_top_level_keys_ignored() {
        let text = err(r#"{"text":"a","sampling_params":{"colour":1}}"#).unwrap();
        assert!(
            text.starts_with("unknown field `colour`, expected one of `max_new_tokens`, `stop`,"),
            "{text}"
        );
        assert!(text.ends_with("`watermark`, `choice`"), "{text}");
        assert_eq!(err(r#"{"text":"a","colour":1}"#), None);
        assert_eq!(
            err(r#"{"text":"a","sampling_params":{"watermark":{"x":1}}}"#).as_deref(),
            Some("unknown field `x`, expected one of `enabled`, `key`, `context_window`")
        );
    }

    #[test]
    fn null_means_the_default_except_where_the_field_is_not_optional() {
        assert_eq!(
            err(r#"{"text":null,"stream":null,"sampling_params":{"temperature":null}}"#),
            None
        );
        assert_eq!(
            err(r#"{"return_prompt_token_ids":null}"#).as_deref(),
            Some("invalid type: null, expected a boolean")
        );
    }

    #[test]
    fn integers_within_64_bits_have_no_range_but_a_sign_where_unsigned() {
        assert_eq!(
            err(r#"{"sampling_params":{"sampling_seed":-9223372036854775808}}"#),
            None
        );
        assert_eq!(
            err(r#"{"max_thinking_tokens":-1}"#).as_deref(),
            Some("invalid value: integer `-1`, expected u64")
        );
        assert_eq!(err(r#"{"max_thinking_tokens":-0}"#), None);
    }

    #[test]
    fn the_first_violation_in_python_dict_order_wins_and_a_repeated_key_keeps_its_last_value() {
        assert_eq!(
            err(r#"{"stream":1,"return_logprob":"x"}"#).as_deref(),
            Some("invalid type: integer `1`, expected a boolean")
        );
        // `stream` keeps its first position and its last (valid) value.
        assert_eq!(
            err(r#"{"stream":1,"return_logprob":"x","stream":true}"#).as_deref(),
            Some(
                "invalid type: string \"x\", expected a value or an array of values for BoolOrList"
            )
        );
    }

    #[test]
    fn integer_lists_read_from_the_bytes_judge_as_the_element_by_element_path_does() {
        assert_eq!(err(r#"{"input_ids":[ ]}"#), None);
        assert_eq!(err(r#"{"input_ids":[ -0 , 7 ]}"#), None);
        assert_eq!(
            err(r#"{"input_ids":[123456789012345678901234567890]}"#),
            None
        );
        assert_eq!(
            err(r#"{"input_ids":[1, 2.0]}"#).as_deref(),
            Some("invalid type: floating point `2.0`, expected i64")
        );
        assert_eq!(
            err(r#"{"input_ids":[1, true]}"#).as_deref(),
            Some("invalid type: boolean `true`, expected i64")
        );
        assert_eq!(
            err(r#"{"input_ids":[[1, 2], [3, 1e2]]}"#).as_deref(),
            Some("invalid type: floating point `100.0`, expected i64")
        );
        assert_eq!(
            err(r#"{"sampling_params":{"stop_token_ids":[5, "6"]}}"#).as_deref(),
            Some("invalid type: string \"6\", expected i64")
        );
    }

    #[test]
    fn nested_lists_decide_by_their_first_element() {
        assert_eq!(err(r#"{"input_ids":[[1,2],[3]]}"#), None);
        assert_eq!(
            err(r#"{"input_ids":[1,[2]]}"#).as_deref(),
            Some("invalid type: sequence, expected i64")
        );
        assert_eq!(
            err(r#"{"input_ids":["a"]}"#).as_deref(),
            Some("invalid type: string \"a\", expected a sequence")
        );
        assert_eq!(
            err(r#"{"input_ids":[1.0]}"#).as_deref(),
            Some("invalid type: floating point `1.0`, expected i64")
        );
    }
}
