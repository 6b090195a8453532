//! The raw, typed `/generate` body (`GenerateReqInput`) decoded straight from the bytes in one pass, with
//! Pydantic's messages for the fields that fail.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::lax::{
    HiddenStatesMode, Ids, IgnoredPresent, KeyStr, LaxIds, NullableStr, OneOrMany, PyBool, PyInt,
    SamplingInput,
};
use super::pydantic::{PyError, Ty, py_repr, validate_model};
use crate::config::SglangVersion;
use crate::error::{RequestError, ValidationErrors};
use crate::pyfmt::str_repr;
use crate::release::JsonDecoder;

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
    /// `return_hidden_states` was `"last"`, which only 0.5.23 accepts.
    pub return_hidden_states_last: bool,
    pub has_lora_path: bool,
    pub custom_logit_processor: Option<CustomLogitProcessor>,
    pub data_parallel_rank: Option<i64>,
    pub routed_dp_rank: Option<i64>,
    /// `return_routed_experts` (0.5.15 and later): one flag for every item.
    pub return_routed_experts: bool,
    /// `routed_experts_start_len`: the first position with a routes row, for every item (default 0).
    pub routed_experts_start_len: i64,
    /// `return_sampling_mask` (0.5.23): a flag, or one per prompt.
    pub return_sampling_mask: Option<OneOrMany<bool>>,
    /// `sampling_logprobs_mode` (0.5.23): `"selected"`, `"support"` or `null`, or one per prompt.
    pub sampling_logprobs_mode: Option<OneOrMany<Option<String>>>,
    /// `return_prompt_token_ids` (0.5.23): one flag for every item.
    pub return_prompt_token_ids: bool,
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
pub fn parse_generate(body: &[u8]) -> Result<GenerateReqInput, RequestError> {
    parse(body, &[], None)
}

/// [`parse_generate`] as the release's FastAPI admits a body: a body its model refuses (a field of the wrong
/// type, a `null` where the field takes none, a field the server otherwise ignores) gets Pydantic's errors for the
/// whole body, field by field (`request::pydantic`).
pub fn parse_generate_as(
    body: &[u8],
    version: SglangVersion,
) -> Result<GenerateReqInput, RequestError> {
    parse(body, version.generate_model, Some(version.json_decoder))
}

fn parse(
    body: &[u8],
    model: &'static [(&'static str, &'static str)],
    decoder: Option<JsonDecoder>,
) -> Result<GenerateReqInput, RequestError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(RequestError::Validation(ValidationErrors(vec![
            "{'type': 'missing', 'loc': ('body',), 'msg': 'Field required', 'input': None}"
                .to_owned(),
        ])));
    }
    let mut field_error = None;
    let mut suspect = false;
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = BodySeed {
        field_error: &mut field_error,
        model,
        suspect: &mut suspect,
    }
    .deserialize(&mut de)
    .and_then(|req| de.end().map(|()| req));
    match parsed {
        // The fast parse admits what the model may not: check the whole body against it.
        Ok(req) if suspect || matches!(req.sampling_params, Some(SamplingInput::Other)) => {
            match model_errors(body, model) {
                Some(errors) => Err(errors),
                None => Ok(req),
            }
        }
        Ok(req) => Ok(req),
        Err(err)
            if err.is_data()
                && let Some(errors) = model_errors(body, model) =>
        {
            Err(errors)
        }
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
            _ => RequestError::Validation(match decoder {
                Some(decoder) => json_decode_error(body, &err, decoder),
                None => serde_decode_error(&err),
            }),
        }),
    }
}

/// Pydantic's errors for `body` under `model`, or `None` when the model admits it (or it is not JSON).
fn model_errors(body: &[u8], model: &[(&str, &str)]) -> Option<RequestError> {
    if model.is_empty() {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    // `GenerateReqInput` is a dataclass: a body that is not an object fails its type check whole.
    if !value.is_object() {
        return Some(RequestError::Validation(ValidationErrors(vec![format!(
            "{{'type': 'dataclass_type', 'loc': ('body',), 'msg': 'Input should be a dictionary or an instance of \
             GenerateReqInput', 'input': {}, 'ctx': {{'class_name': 'GenerateReqInput'}}}}",
            py_repr(&value)
        )])));
    }
    let model: Vec<(&str, Ty)> = model
        .iter()
        .filter_map(|&(field, ty)| Some((field, Ty::parse(ty)?)))
        .collect();
    let errors = validate_model(&value, &model);
    (!errors.is_empty()).then(|| {
        RequestError::Validation(ValidationErrors(
            errors.iter().map(PyError::render).collect(),
        ))
    })
}

pub fn validation_error(kind: &str, field_loc: &str, msg: &str) -> RequestError {
    let loc = if field_loc == "()" {
        "('body',)".to_owned()
    } else {
        format!("('body', {field_loc})")
    };
    let err = format!(
        "{{'type': '{kind}', 'loc': {loc}, 'msg': {}}}",
        str_repr(msg)
    );
    RequestError::Validation(ValidationErrors(vec![err]))
}

/// serde_json's account of a body that is not JSON, where no release's decoder is known.
fn serde_decode_error(err: &serde_json::Error) -> ValidationErrors {
    ValidationErrors(vec![format!(
        "{{'type': 'json_invalid', 'loc': ('body', {}), 'msg': 'JSON decode error', 'input': {{}}, 'ctx': {{'error': {}}}}}",
        err.column(),
        str_repr(&err.to_string())
    )])
}

/// FastAPI's error for a body that is not JSON: where and why the release's decoder stops
/// (`request::json_error`), or serde_json's account where that decoder would have read it (a bare `NaN`, which
/// Python's `json` takes and the server does not).
pub fn json_decode_error(
    body: &[u8],
    err: &serde_json::Error,
    decoder: JsonDecoder,
) -> ValidationErrors {
    let (message, position) = match super::json_error::decode_error(body, decoder) {
        Some((message, position)) => (message.to_owned(), position),
        None => (err.to_string(), err.column()),
    };
    ValidationErrors(vec![format!(
        "{{'type': 'json_invalid', 'loc': ('body', {position}), 'msg': 'JSON decode error', 'input': {{}}, 'ctx': {{'error': {}}}}}",
        str_repr(&message)
    )])
}

struct BodySeed<'a> {
    field_error: &'a mut Option<FieldError>,
    /// The release's model (empty: none), for the fields the fast parse skips.
    model: &'static [(&'static str, &'static str)],
    /// Set when the body holds what the model may refuse and the fast parse admitted.
    suspect: &'a mut bool,
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
                        field!("input_embeds", Option<IgnoredPresent>, "list_type").is_some();
                    // The server reads no embeddings; the model still types them.
                    *self.suspect |= req.has_input_embeds;
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
                    req.token_ids_logprob =
                        field!("token_ids_logprob", Option<LaxIds>, "list_type").map(|ids| ids.0)
                }
                // These take no `null` in the model (`bool` with a default).
                "return_text_in_logprobs" => {
                    let flag = field!("return_text_in_logprobs", Option<PyBool>, "bool_type");
                    *self.suspect |= flag.is_none();
                    req.return_text_in_logprobs = flag.is_some_and(|b| b.0)
                }
                "stream" => {
                    let flag = field!("stream", Option<PyBool>, "bool_type");
                    *self.suspect |= flag.is_none();
                    req.stream = flag.is_some_and(|b| b.0)
                }
                "return_hidden_states" => {
                    let modes = match field!(
                        "return_hidden_states",
                        Option<OneOrMany<HiddenStatesMode>>,
                        "bool_type"
                    ) {
                        None => {
                            *self.suspect = true;
                            Vec::new()
                        }
                        Some(OneOrMany::One(mode)) => vec![mode],
                        Some(OneOrMany::Many(modes)) => modes,
                    };
                    req.return_hidden_states = modes.iter().any(|mode| mode.0);
                    req.return_hidden_states_last = modes.iter().any(|mode| mode.1);
                }
                "lora_path" => {
                    req.has_lora_path =
                        field!("lora_path", Option<IgnoredPresent>, "string_type").is_some();
                    *self.suspect |= req.has_lora_path;
                }
                "custom_logit_processor" => {
                    req.custom_logit_processor = field!(
                        "custom_logit_processor",
                        Option<OneOrMany<NullableStr>>,
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
                "return_routed_experts" => {
                    let flag = field!("return_routed_experts", Option<PyBool>, "bool_type");
                    *self.suspect |= flag.is_none();
                    req.return_routed_experts = flag.is_some_and(|b| b.0)
                }
                "return_prompt_token_ids" => {
                    let flag = field!("return_prompt_token_ids", Option<PyBool>, "bool_type");
                    *self.suspect |= flag.is_none();
                    req.return_prompt_token_ids = flag.is_some_and(|b| b.0)
                }
                "routed_experts_start_len" => {
                    let start = field!("routed_experts_start_len", Option<PyInt>, "int_type");
                    *self.suspect |= start.is_none();
                    req.routed_experts_start_len = start.map_or(0, |i| i.0)
                }
                "return_sampling_mask" => {
                    req.return_sampling_mask = field!(
                        "return_sampling_mask",
                        Option<OneOrMany<PyBool>>,
                        "bool_type"
                    )
                    .map(|v| v.map(|b| b.0))
                }
                "sampling_logprobs_mode" => {
                    req.sampling_logprobs_mode = field!(
                        "sampling_logprobs_mode",
                        Option<OneOrMany<NullableStr>>,
                        "literal_error"
                    )
                    .map(|v| v.map(|s| s.0));
                    // A literal: the model names the values it takes.
                    *self.suspect |= req.sampling_logprobs_mode.is_some();
                }
                "routed_dp_rank" => {
                    req.routed_dp_rank =
                        field!("routed_dp_rank", Option<PyInt>, "int_type").map(|i| i.0)
                }
                other => {
                    map.next_value::<IgnoredAny>()?;
                    // A field of the model the server does not read: the model still types it.
                    *self.suspect |= self.model.iter().any(|(field, _)| *field == other);
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
