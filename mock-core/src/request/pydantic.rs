//! Pydantic v2's validation of a request model, for the exact 400 that FastAPI answers a body with: every error's
//! type, location, message and input, field by field in the model's order.
//!
//! FastAPI validates the decoded JSON body against the handler's model in Pydantic's lax Python mode before any
//! SGLang code runs. The server's own parsers are the fast path and decide whether a body is admitted; when they
//! refuse one (or admit one that only Pydantic would refuse), this module re-validates the whole body and writes
//! the errors as the release's FastAPI does. A model is data: a list of `(field, type)` in the release's field
//! order (`crate::release`), each type in Pydantic's own notation, the labels its union errors carry
//! (`nullable[union[str,list[str]]]`, `dict[str,any]`, `literal['last']`), as `scripts/pydantic_models.py`
//! prints them from the running release's `core_schema`.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::OnceLock;

use serde_json::Value;

use crate::config::SglangVersion;
use crate::error::ValidationErrors;
use crate::pyfmt::{float_repr, str_repr};
use crate::release::ControlBodies;

/// A field's type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    Any,
    Str,
    Int,
    Float,
    Bool,
    List(Box<Ty>),
    Dict(Box<Ty>, Box<Ty>),
    Nullable(Box<Ty>),
    /// Smart-mode union: the members in the order the release's schema holds them.
    Union(Vec<Ty>),
    Literal(Vec<String>),
    /// A nested pydantic model: the value must be an object (its fields are not checked).
    Model,
    /// `PlainValidator(validate_optional_list_i64_1d_2d)` of `srt/utils/field_validators.py` (`ids` in the
    /// notation): a flat or nested list of int64, refused with a `value_error`.
    IdLists,
    /// A constrained number (`confloat(ge=0)`, `constrained-float` in the notation and in a union's labels): a
    /// value of another type fails as the number's type does; its bounds are not held, so a number passes.
    Constrained(Box<Ty>),
}

impl Ty {
    /// Parses the notation; `None` for text that is not a type.
    pub(crate) fn parse(text: &str) -> Option<Ty> {
        let (ty, rest) = Ty::parse_prefix(text)?;
        rest.is_empty().then_some(ty)
    }

    /// The type arguments `[a,b]` at the start of `text`, and the rest.
    fn parse_args(text: &str) -> Option<(Vec<Ty>, &str)> {
        let mut rest = text.strip_prefix('[')?;
        let mut out = Vec::new();
        loop {
            let (ty, after) = Ty::parse_prefix(rest)?;
            out.push(ty);
            match after.as_bytes().first()? {
                b',' => rest = &after[1..],
                b']' => return Some((out, &after[1..])),
                _ => return None,
            }
        }
    }

    fn parse_prefix(text: &str) -> Option<(Ty, &str)> {
        for (name, ty) in [
            ("constrained-int", Ty::Constrained(Box::new(Ty::Int))),
            ("constrained-float", Ty::Constrained(Box::new(Ty::Float))),
            ("any", Ty::Any),
            ("str", Ty::Str),
            ("int", Ty::Int),
            ("float", Ty::Float),
            ("bool", Ty::Bool),
            ("ids", Ty::IdLists),
            ("model", Ty::Model),
        ] {
            // A longer name (`integer`) leaves a rest that no caller takes.
            if let Some(rest) = text.strip_prefix(name) {
                return Some((ty, rest));
            }
        }
        if let Some(rest) = text.strip_prefix("literal[") {
            let end = rest.find(']')?;
            let values = rest[..end]
                .split(',')
                .map(|v| v.strip_prefix('\'')?.strip_suffix('\'').map(str::to_owned))
                .collect::<Option<Vec<String>>>()?;
            return Some((Ty::Literal(values), &rest[end + 1..]));
        }
        let (head, rest) = text.split_at(text.find('[')?);
        let (mut tys, rest) = Ty::parse_args(rest)?;
        let ty = match (head, tys.len()) {
            ("list", 1) => Ty::List(Box::new(tys.remove(0))),
            ("nullable", 1) => Ty::Nullable(Box::new(tys.remove(0))),
            ("dict", 2) => {
                let value = tys.remove(1);
                Ty::Dict(Box::new(tys.remove(0)), Box::new(value))
            }
            ("union", n) if n >= 2 => Ty::Union(tys),
            _ => return None,
        };
        Some((ty, rest))
    }

    /// Pydantic's label of the type: what a union error puts in its location.
    pub(crate) fn label(&self) -> String {
        match self {
            Ty::Any => "any".to_owned(),
            Ty::Str => "str".to_owned(),
            Ty::Int => "int".to_owned(),
            Ty::Float => "float".to_owned(),
            Ty::Bool => "bool".to_owned(),
            Ty::IdLists => "ids".to_owned(),
            Ty::Model => "model".to_owned(),
            Ty::Constrained(inner) => format!("constrained-{}", inner.label()),
            Ty::List(item) => format!("list[{}]", item.label()),
            Ty::Dict(key, value) => format!("dict[{},{}]", key.label(), value.label()),
            Ty::Nullable(inner) => format!("nullable[{}]", inner.label()),
            Ty::Union(members) => {
                let labels: Vec<String> = members.iter().map(Ty::label).collect();
                format!("union[{}]", labels.join(","))
            }
            Ty::Literal(values) => {
                let values: Vec<String> = values.iter().map(|v| format!("'{v}'")).collect();
                format!("literal[{}]", values.join(","))
            }
        }
    }
}

/// One part of an error's location.
#[derive(Debug, Clone, PartialEq)]
enum Loc {
    Key(String),
    Index(usize),
}

/// One validation error, as `exc.errors()` holds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PyError {
    kind: &'static str,
    loc: Vec<Loc>,
    msg: String,
    input: String,
    ctx: Option<String>,
}

impl PyError {
    fn new(kind: &'static str, msg: impl Into<String>, input: &Value) -> PyError {
        PyError {
            kind,
            loc: Vec::new(),
            msg: msg.into(),
            input: py_repr(input),
            ctx: None,
        }
    }

    /// The error's dict as Python writes it: `{'type': ..., 'loc': (...), 'msg': ..., 'input': ...}`.
    pub(crate) fn render(&self) -> String {
        let mut out = format!("{{'type': '{}', 'loc': (", self.kind);
        for (i, part) in self.loc.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            match part {
                Loc::Key(key) => out.push_str(&str_repr(key)),
                Loc::Index(i) => {
                    let _ = write!(out, "{i}");
                }
            }
        }
        if self.loc.len() == 1 {
            out.push(',');
        }
        let _ = write!(
            out,
            "), 'msg': {}, 'input': {}",
            str_repr(&self.msg),
            self.input
        );
        if let Some(ctx) = &self.ctx {
            let _ = write!(out, ", 'ctx': {ctx}");
        }
        out.push('}');
        out
    }
}

/// Python's `repr` of a decoded JSON value.
pub fn py_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, value);
    out
}

fn write_repr(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => match (n.is_f64(), n.as_f64()) {
            (true, Some(f)) => out.push_str(&float_repr(f)),
            _ => {
                let _ = write!(out, "{n}");
            }
        },
        Value::String(s) => out.push_str(&str_repr(s)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&str_repr(key));
                out.push_str(": ");
                write_repr(out, item);
            }
            out.push('}');
        }
    }
}

/// Validates a body against a model (`(field, type)` in field order), each error located under `('body',
/// field)`. Fields the model does not have are ignored, as a dataclass model ignores them.
pub(super) fn validate_model(body: &Value, model: &[(&str, Ty)]) -> Vec<PyError> {
    validate_fields(body, model.iter().map(|(field, ty)| (*field, ty, false)))
}

/// The errors of an object's fields `(name, type, required)` in order, each located under `('body', name)`; a
/// required field the body lacks is `missing`, with the whole body as its input. Nothing for a non-object.
fn validate_fields<'a>(
    body: &Value,
    fields: impl IntoIterator<Item = (&'a str, &'a Ty, bool)>,
) -> Vec<PyError> {
    let mut errors = Vec::new();
    let Value::Object(map) = body else {
        return errors;
    };
    for (field, ty, required) in fields {
        let start = errors.len();
        match map.get(field) {
            Some(value) => validate(ty, value, &mut errors),
            None if required => errors.push(PyError::new("missing", "Field required", body)),
            None => {}
        }
        for error in &mut errors[start..] {
            let mut loc = vec![Loc::Key("body".to_owned()), Loc::Key(field.to_owned())];
            loc.append(&mut error.loc);
            error.loc = loc;
        }
    }
    errors
}

/// Pydantic's errors for a control route's body (`/update_weight_version`, `/pause_generation`, ...) under the
/// release's model, or `None` when the model admits it or the route has none. An empty body is `{}`, as the
/// server reads it.
pub fn control_errors(
    body: &[u8],
    version: SglangVersion,
    route: &str,
) -> Option<ValidationErrors> {
    let (_, class, fields) = version
        .control_models
        .iter()
        .find(|(path, _, _)| *path == route)?;
    let value: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_slice(body).ok()?
    };
    let errors = match (&value, version.control_bodies) {
        (Value::Object(map), shape) => {
            let mut errors = Vec::new();
            for (field, notation) in *fields {
                let (required, notation) = match notation.strip_prefix('!') {
                    Some(rest) => (true, rest),
                    None => (false, *notation),
                };
                let start = errors.len();
                match (map.get(*field), Ty::parse(notation)) {
                    (Some(item), Some(ty)) => validate(&ty, item, &mut errors),
                    (None, _) if required => {
                        errors.push(PyError::new("missing", "Field required", &value));
                    }
                    _ => {}
                }
                for error in &mut errors[start..] {
                    error.loc.insert(0, Loc::Key((*field).to_owned()));
                }
            }
            if errors.is_empty() {
                return None;
            }
            match shape {
                ControlBodies::Dataclass => {}
                ControlBodies::Struct => {
                    let member = format!("function-after[build_struct(), {class}]");
                    for error in &mut errors {
                        error.loc.insert(0, Loc::Key(member.clone()));
                    }
                    errors.insert(0, is_instance_error(class, &value));
                }
            }
            errors
        }
        (_, ControlBodies::Dataclass) => {
            let mut error = PyError::new(
                "dataclass_type",
                format!("Input should be a dictionary or an instance of {class}"),
                &value,
            );
            error.ctx = Some(format!("{{'class_name': {}}}", str_repr(class)));
            vec![error]
        }
        (_, ControlBodies::Struct) => {
            let mut dict = PyError::new("dict_type", "Input should be a valid dictionary", &value);
            dict.loc = vec![Loc::Key(format!("function-after[build_struct(), {class}]"))];
            vec![is_instance_error(class, &value), dict]
        }
    };
    Some(ValidationErrors(
        errors
            .into_iter()
            .map(|mut error| {
                error.loc.insert(0, Loc::Key("body".to_owned()));
                error.render()
            })
            .collect(),
    ))
}

/// The request models FastAPI validates the OpenAI routes' bodies against (`CompletionRequest`,
/// `ChatCompletionRequest`, `TokenizeRequest`, `DetokenizeRequest` in `srt/entrypoints/openai/protocol.py`): per
/// release and route, every field a JSON value can fail, in the schema's order, printed from the wheels by
/// `scripts/openai_models.py`.
const OPENAI_MODELS: &str = include_str!("../../data/openai_models.json");

/// A model's fields: name, type, and whether the body must have it.
type Fields = Vec<(String, Ty, bool)>;

/// The models by release, then by route.
type Models = HashMap<String, HashMap<String, Fields>>;

/// [`OPENAI_MODELS`] parsed once.
fn openai_models() -> &'static Models {
    static MODELS: OnceLock<Models> = OnceLock::new();
    MODELS.get_or_init(|| {
        let raw: HashMap<String, HashMap<String, Vec<(String, String)>>> =
            serde_json::from_str(OPENAI_MODELS).expect("openai_models.json is the script's JSON");
        let field = |release: &str, api: &str, (name, notation): (String, String)| {
            let (required, notation) = match notation.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, notation.as_str()),
            };
            let ty = Ty::parse(notation).unwrap_or_else(|| {
                panic!("openai_models.json: {release} {api} {name}: {notation:?} is not a type")
            });
            (name, ty, required)
        };
        raw.into_iter()
            .map(|(release, apis)| {
                let apis = apis
                    .into_iter()
                    .map(|(api, fields)| {
                        let fields = fields
                            .into_iter()
                            .map(|f| field(&release, &api, f))
                            .collect();
                        (api, fields)
                    })
                    .collect();
                (release, apis)
            })
            .collect()
    })
}

/// Pydantic's errors for an OpenAI request body under the release's model of `route` (`completions`, `chat`,
/// `tokenize`, `detokenize`), every field's in the model's order; `None` when the model admits the body's fields, when the body is
/// not an object (the route's own error), or when the release's model is not held.
pub fn openai_errors(
    body: &Value,
    version: SglangVersion,
    route: &str,
) -> Option<ValidationErrors> {
    let fields = openai_models().get(version.as_str())?.get(route)?;
    let errors = validate_fields(
        body,
        fields
            .iter()
            .map(|(field, ty, required)| (field.as_str(), ty, *required)),
    );
    (!errors.is_empty()).then(|| ValidationErrors(errors.iter().map(PyError::render).collect()))
}

/// The first member's error of a struct's union: the body is not an instance of the class.
fn is_instance_error(class: &str, value: &Value) -> PyError {
    let mut error = PyError::new(
        "is_instance_of",
        format!("Input should be an instance of {class}"),
        value,
    );
    error.loc = vec![Loc::Key(format!("is-instance[{class}]"))];
    error.ctx = Some(format!("{{'class': {}}}", str_repr(class)));
    error
}

/// Appends the errors of `value` under `ty` (locations relative to the value).
fn validate(ty: &Ty, value: &Value, errors: &mut Vec<PyError>) {
    match ty {
        Ty::Any => {}
        Ty::Str => {
            if !value.is_string() {
                errors.push(PyError::new(
                    "string_type",
                    "Input should be a valid string",
                    value,
                ));
            }
        }
        Ty::Int => {
            if let Some(error) = int_error(value) {
                errors.push(error);
            }
        }
        Ty::Float => {
            if let Some(error) = float_error(value) {
                errors.push(error);
            }
        }
        Ty::Constrained(inner) => validate(inner, value, errors),
        Ty::Bool => {
            if let Some(error) = bool_error(value) {
                errors.push(error);
            }
        }
        Ty::List(item) => match value {
            Value::Array(items) => {
                for (i, element) in items.iter().enumerate() {
                    let start = errors.len();
                    validate(item, element, errors);
                    for error in &mut errors[start..] {
                        error.loc.insert(0, Loc::Index(i));
                    }
                }
            }
            Value::Null
            | Value::Bool(_)
            | Value::Number(_)
            | Value::String(_)
            | Value::Object(_) => errors.push(PyError::new(
                "list_type",
                "Input should be a valid list",
                value,
            )),
        },
        Ty::Dict(key, item) => match value {
            Value::Object(map) => {
                for (k, element) in map {
                    let start = errors.len();
                    validate(key, &Value::String(k.clone()), errors);
                    validate(item, element, errors);
                    for error in &mut errors[start..] {
                        error.loc.insert(0, Loc::Key(k.clone()));
                    }
                }
            }
            Value::Null
            | Value::Bool(_)
            | Value::Number(_)
            | Value::String(_)
            | Value::Array(_) => errors.push(PyError::new(
                "dict_type",
                "Input should be a valid dictionary",
                value,
            )),
        },
        Ty::Nullable(inner) => {
            if !value.is_null() {
                validate(inner, value, errors);
            }
        }
        Ty::Union(members) => {
            let mut all = Vec::new();
            for member in members {
                let mut member_errors = Vec::new();
                validate(member, value, &mut member_errors);
                if member_errors.is_empty() {
                    return;
                }
                let label = member.label();
                for error in &mut member_errors {
                    error.loc.insert(0, Loc::Key(label.clone()));
                }
                all.append(&mut member_errors);
            }
            errors.append(&mut all);
        }
        Ty::Literal(values) => {
            if !value
                .as_str()
                .is_some_and(|s| values.iter().any(|v| v == s))
            {
                let quoted: Vec<String> = values.iter().map(|v| format!("'{v}'")).collect();
                let expected = match quoted.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        format!("{} or {last}", rest.join(", "))
                    }
                    _ => quoted.join(""),
                };
                let mut error = PyError::new(
                    "literal_error",
                    format!("Input should be {expected}"),
                    value,
                );
                error.ctx = Some(format!("{{'expected': {}}}", str_repr(&expected)));
                errors.push(error);
            }
        }
        Ty::Model => {
            if !value.is_object() {
                errors.push(PyError::new(
                    "model_attributes_type",
                    "Input should be a valid dictionary or object to extract fields from",
                    value,
                ));
            }
        }
        Ty::IdLists => {
            if let Some(message) = id_lists_error(value) {
                let mut error =
                    PyError::new("value_error", format!("Value error, {message}"), value);
                error.ctx = Some(format!("{{'error': ValueError({})}}", str_repr(&message)));
                errors.push(error);
            }
        }
    }
}

/// Python's `type(v).__name__` of a decoded JSON value.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Whether a decoded JSON value is a Python `int` (a `bool` is one).
fn is_py_int(value: &Value) -> bool {
    value.is_boolean() || value.as_number().is_some_and(|n| !n.is_f64())
}

/// `validate_optional_list_i64_1d_2d`'s refusal, without its `ValueError`.
fn id_lists_error(value: &Value) -> Option<String> {
    let items = match value {
        Value::Null => return None,
        Value::Array(items) => items,
        other @ (Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Object(_)) => {
            return Some(format!("must be list or null; got {}", type_name(other)));
        }
    };
    let first = items.first()?;
    if is_py_int(first) {
        return list_i64_error(value);
    }
    if first.is_array() {
        return items
            .iter()
            .enumerate()
            .find_map(|(i, row)| list_i64_error(row).map(|e| format!("row {i}: {e}")));
    }
    Some(format!(
        "elements must be int or list; got {}",
        type_name(first)
    ))
}

/// `validate_list_i64_1d`'s refusal: a list whose first element is an int and every element fits `array("q")`.
fn list_i64_error(value: &Value) -> Option<String> {
    let items = match value {
        Value::Null => return Some("must not be None".to_owned()),
        Value::Array(items) => items,
        other @ (Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Object(_)) => {
            return Some(format!("must be list; got {}", type_name(other)));
        }
    };
    let first = items.first()?;
    if !is_py_int(first) {
        return Some(format!("elements must be int; got {}", type_name(first)));
    }
    items.iter().find_map(|item| {
        if item.is_boolean() || item.as_i64().is_some() {
            None
        } else if is_py_int(item) {
            Some("contains non-int64 element: int too big to convert".to_owned())
        } else {
            Some(format!(
                "contains non-int64 element: '{}' object cannot be interpreted as an integer",
                type_name(item)
            ))
        }
    })
}

/// Lax `int`: an int, a bool, a float without a fraction inside int64, or a string of one.
fn int_error(value: &Value) -> Option<PyError> {
    const PARSING: &str = "Input should be a valid integer, unable to parse string as an integer";
    match value {
        Value::Bool(_) => None,
        Value::Number(n) if !n.is_f64() => None,
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if f.fract() != 0.0 {
                Some(PyError::new(
                    "int_from_float",
                    "Input should be a valid integer, got a number with a fractional part",
                    value,
                ))
            } else if f.abs() >= i64::MAX as f64 {
                Some(PyError::new(
                    "int_parsing_size",
                    "Unable to parse input string as an integer, exceeded maximum size",
                    value,
                ))
            } else {
                None
            }
        }
        Value::String(s) => (!lax_int_str(s)).then(|| PyError::new("int_parsing", PARSING, value)),
        Value::Null | Value::Array(_) | Value::Object(_) => Some(PyError::new(
            "int_type",
            "Input should be a valid integer",
            value,
        )),
    }
}

/// A query parameter FastAPI reads as an `int` (`dp_rank: Optional[int]`): Pydantic's lax reading of a string
/// (`" 1"`, `"+1"`, `"1_0"`, `"1.0"`), or its error located at `('query', name)`. `Ok(None)` for an int
/// beyond `i64`, which Python reads and no rank equals.
pub fn query_int(name: &str, raw: &str) -> Result<Option<i64>, ValidationErrors> {
    let value = Value::String(raw.to_owned());
    if let Some(mut error) = int_error(&value) {
        error.loc = vec![Loc::Key("query".to_owned()), Loc::Key(name.to_owned())];
        return Err(ValidationErrors(vec![error.render()]));
    }
    let text = raw.trim().replace('_', "");
    let whole = text
        .split_once('.')
        .map_or(text.as_str(), |(whole, _)| whole);
    Ok(whole.parse().ok())
}

/// Digits with single underscores between them.
fn digits(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
        && s.chars().all(|c| c.is_ascii_digit() || c == '_')
}

/// A string Pydantic reads as an int: trimmed, a sign, digits, and a fraction of zeros (`" 3"`, `"+3"`, `"1_000"`,
/// `"3.0"`).
fn lax_int_str(s: &str) -> bool {
    let s = s.trim();
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    match s.split_once('.') {
        Some((whole, fraction)) => {
            digits(whole) && !fraction.is_empty() && fraction.chars().all(|c| c == '0')
        }
        None => digits(s),
    }
}

/// Lax `float`: a number, a bool, or a string Python's `float()` reads.
fn float_error(value: &Value) -> Option<PyError> {
    match value {
        Value::Bool(_) | Value::Number(_) => None,
        Value::String(s) => {
            let text = s.trim().replace('_', "");
            let lower = text.to_ascii_lowercase();
            let special = ["nan", "inf", "infinity"]
                .iter()
                .any(|w| lower.trim_start_matches(['+', '-']) == *w);
            (!special && text.parse::<f64>().is_err() || text.is_empty()).then(|| {
                PyError::new(
                    "float_parsing",
                    "Input should be a valid number, unable to parse string as a number",
                    value,
                )
            })
        }
        Value::Null | Value::Array(_) | Value::Object(_) => Some(PyError::new(
            "float_type",
            "Input should be a valid number",
            value,
        )),
    }
}

/// Lax `bool`: a bool, the ints 0 and 1, the floats 0.0 and 1.0, and Pydantic's words for true and false.
fn bool_error(value: &Value) -> Option<PyError> {
    const PARSING: &str = "Input should be a valid boolean, unable to interpret input";
    const WORDS: [&str; 12] = [
        "0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes",
    ];
    let type_error = || PyError::new("bool_type", "Input should be a valid boolean", value);
    match value {
        Value::Bool(_) => None,
        Value::Number(n) if !n.is_f64() => matches!(n.as_i64(), Some(0 | 1))
            .then_none(|| PyError::new("bool_parsing", PARSING, value)),
        Value::Number(n) => {
            matches!(n.as_f64(), Some(f) if f == 0.0 || f == 1.0).then_none(type_error)
        }
        Value::String(s) => {
            let lower = s.to_ascii_lowercase();
            WORDS
                .contains(&lower.as_str())
                .then_none(|| PyError::new("bool_parsing", PARSING, value))
        }
        Value::Null | Value::Array(_) | Value::Object(_) => Some(type_error()),
    }
}

/// `None` when true, else the error.
trait ThenNone {
    fn then_none(self, error: impl FnOnce() -> PyError) -> Option<PyError>;
}

impl ThenNone for bool {
    fn then_none(self, error: impl FnOnce() -> PyError) -> Option<PyError> {
        (!self).then(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_notation_reads_back_as_written() {
        for text in [
            "nullable[union[str,list[str]]]",
            "nullable[union[list[list[list[float]]],list[list[float]]]]",
            "nullable[union[list[dict[any,any]],dict[any,any]]]",
            "union[list[union[bool,literal['last']]],bool,literal['last']]",
            "nullable[union[list[nullable[literal['selected','support']]],literal['selected','support']]]",
            "ids",
            "nullable[dict[str,str]]",
            "nullable[union[literal['low','high'],constrained-float]]",
            "list[constrained-int]",
        ] {
            assert_eq!(Ty::parse(text).map(|t| t.label()).as_deref(), Some(text));
        }
        for bad in [
            "",
            "lst[str]",
            "list[str",
            "union[str]",
            "dict[str]",
            "str]",
        ] {
            assert_eq!(Ty::parse(bad), None, "{bad}");
        }
    }

    fn errors(ty: &str, value: Value) -> Vec<String> {
        let ty = Ty::parse(ty).expect("a type");
        validate_model(&json!({ "f": value }), &[("f", ty)])
            .iter()
            .map(PyError::render)
            .collect()
    }

    /// Expected texts printed by Pydantic 2.14.4 (`TypeAdapter(...).validate_python`, `e.errors()`), with
    /// `('body', 'f')` in front of each location.
    #[test]
    fn errors_are_pydantics_own() {
        assert_eq!(
            errors(
                "nullable[union[list[list[list[float]]],list[list[float]]]]",
                json!([[1, "x"]])
            ),
            [
                "{'type': 'list_type', 'loc': ('body', 'f', 'list[list[list[float]]]', 0, 0), 'msg': 'Input should be a valid list', 'input': 1}",
                "{'type': 'list_type', 'loc': ('body', 'f', 'list[list[list[float]]]', 0, 1), 'msg': 'Input should be a valid list', 'input': 'x'}",
                "{'type': 'float_parsing', 'loc': ('body', 'f', 'list[list[float]]', 0, 1), 'msg': 'Input should be a valid number, unable to parse string as a number', 'input': 'x'}",
            ]
        );
        assert_eq!(
            errors(
                "nullable[union[list[dict[str,any]],dict[str,any]]]",
                json!([{}, 1])
            ),
            [
                "{'type': 'dict_type', 'loc': ('body', 'f', 'list[dict[str,any]]', 1), 'msg': 'Input should be a valid dictionary', 'input': 1}",
                "{'type': 'dict_type', 'loc': ('body', 'f', 'dict[str,any]'), 'msg': 'Input should be a valid dictionary', 'input': [{}, 1]}",
            ]
        );
        assert_eq!(
            errors("nullable[union[list[int],int]]", json!(1.5)),
            [
                "{'type': 'list_type', 'loc': ('body', 'f', 'list[int]'), 'msg': 'Input should be a valid list', 'input': 1.5}",
                "{'type': 'int_from_float', 'loc': ('body', 'f', 'int'), 'msg': 'Input should be a valid integer, got a number with a fractional part', 'input': 1.5}",
            ]
        );
        assert_eq!(
            errors("nullable[union[list[int],int]]", json!(1e20)),
            [
                "{'type': 'list_type', 'loc': ('body', 'f', 'list[int]'), 'msg': 'Input should be a valid list', 'input': 1e+20}",
                "{'type': 'int_parsing_size', 'loc': ('body', 'f', 'int'), 'msg': 'Unable to parse input string as an integer, exceeded maximum size', 'input': 1e+20}"
            ]
        );
        assert_eq!(
            errors("bool", Value::Null),
            [
                "{'type': 'bool_type', 'loc': ('body', 'f'), 'msg': 'Input should be a valid boolean', 'input': None}"
            ]
        );
        assert_eq!(
            errors("nullable[union[list[bool],bool]]", json!([2])),
            [
                "{'type': 'bool_parsing', 'loc': ('body', 'f', 'list[bool]', 0), 'msg': 'Input should be a valid boolean, unable to interpret input', 'input': 2}",
                "{'type': 'bool_type', 'loc': ('body', 'f', 'bool'), 'msg': 'Input should be a valid boolean', 'input': [2]}",
            ]
        );
        assert_eq!(
            errors("literal['abort','retract','in_place']", json!("nap")),
            [
                "{'type': 'literal_error', 'loc': ('body', 'f'), 'msg': \"Input should be 'abort', 'retract' or 'in_place'\", 'input': 'nap', 'ctx': {'expected': \"'abort', 'retract' or 'in_place'\"}}"
            ]
        );
        assert_eq!(
            errors("ids", json!([1, "a"])),
            [
                "{'type': 'value_error', 'loc': ('body', 'f'), 'msg': \"Value error, contains non-int64 element: 'str' object cannot be interpreted as an integer\", 'input': [1, 'a'], 'ctx': {'error': ValueError(\"contains non-int64 element: 'str' object cannot be interpreted as an integer\")}}"
            ]
        );
        assert_eq!(
            errors("ids", json!("x")),
            [
                "{'type': 'value_error', 'loc': ('body', 'f'), 'msg': 'Value error, must be list or null; got str', 'input': 'x', 'ctx': {'error': ValueError('must be list or null; got str')}}"
            ]
        );
    }

    /// A control body under each shape, against what the releases' Pydantic printed for
    /// `UpdateWeightVersionReqInput` and `{"rid": 1}` (0.5.3: a dataclass, `rid` last; 0.5.15: a struct, `rid`
    /// first) and for `PauseGenerationReqInput` and `{"mode": "nap"}`.
    #[test]
    fn control_bodies_are_refused_in_each_releases_shape() {
        use crate::config::SglangVersion;
        let errors = |version, route, body: &str| {
            control_errors(body.as_bytes(), version, route).map(|e| e.0)
        };
        assert_eq!(
            errors(
                SglangVersion::V0_5_3,
                "/update_weight_version",
                r#"{"rid": 1}"#
            )
            .unwrap(),
            [
                "{'type': 'missing', 'loc': ('body', 'new_version'), 'msg': 'Field required', 'input': {'rid': 1}}",
                "{'type': 'string_type', 'loc': ('body', 'rid', 'str'), 'msg': 'Input should be a valid string', 'input': 1}",
                "{'type': 'list_type', 'loc': ('body', 'rid', 'list[str]'), 'msg': 'Input should be a valid list', 'input': 1}",
            ]
        );
        assert_eq!(
            errors(
                SglangVersion::V0_5_15,
                "/update_weight_version",
                r#"{"rid": 1}"#
            )
            .unwrap(),
            [
                "{'type': 'is_instance_of', 'loc': ('body', 'is-instance[UpdateWeightVersionReqInput]'), 'msg': 'Input should be an instance of UpdateWeightVersionReqInput', 'input': {'rid': 1}, 'ctx': {'class': 'UpdateWeightVersionReqInput'}}",
                "{'type': 'string_type', 'loc': ('body', 'function-after[build_struct(), UpdateWeightVersionReqInput]', 'rid'), 'msg': 'Input should be a valid string', 'input': 1}",
                "{'type': 'missing', 'loc': ('body', 'function-after[build_struct(), UpdateWeightVersionReqInput]', 'new_version'), 'msg': 'Field required', 'input': {'rid': 1}}",
            ]
        );
        assert_eq!(
            errors(
                SglangVersion::V0_5_23,
                "/pause_generation",
                r#"{"mode": "nap"}"#
            )
            .unwrap()[1],
            "{'type': 'literal_error', 'loc': ('body', 'function-after[build_struct(), PauseGenerationReqInput]', 'mode'), 'msg': \"Input should be 'abort', 'retract' or 'in_place'\", 'input': 'nap', 'ctx': {'expected': \"'abort', 'retract' or 'in_place'\"}}"
        );
        assert_eq!(
            errors(SglangVersion::V0_5_15, "/abort_request", "[1]").unwrap()[1],
            "{'type': 'dict_type', 'loc': ('body', 'function-after[build_struct(), AbortReq]'), 'msg': 'Input should be a valid dictionary', 'input': [1]}"
        );
        assert_eq!(
            errors(
                SglangVersion::V0_5_15,
                "/update_weight_version",
                r#"{"new_version": "v"}"#
            ),
            None
        );
        assert_eq!(
            errors(
                SglangVersion::V0_5_3,
                "/pause_generation",
                r#"{"mode": "nap"}"#
            ),
            None
        );
        assert_eq!(errors(SglangVersion::V0_5_23, "/flush_cache", "{}"), None);
    }

    /// The parts of the errors the other tests leave out, each against Pydantic 2.14.4's own text: a dict's
    /// `repr` with several keys, a one-value literal, the type names of the `ids` validator (a float, a list)
    /// and an int past int64, which Python's int holds.
    #[test]
    fn reprs_literals_and_type_names_are_pythons() {
        assert_eq!(
            py_repr(&json!({"a": 1, "b": [1.5, "x", null, true]})),
            "{'a': 1, 'b': [1.5, 'x', None, True]}"
        );
        assert_eq!(py_repr(&json!(1e20)), "1e+20");
        assert_eq!(
            [json!(1e-5), json!(1e16), json!(123456789.0)].map(|v| py_repr(&v)),
            ["1e-05", "1e+16", "123456789.0"]
        );
        assert_eq!(
            errors("literal['last']", json!("x")),
            [
                "{'type': 'literal_error', 'loc': ('body', 'f'), 'msg': \"Input should be 'last'\", 'input': 'x', 'ctx': {'expected': \"'last'\"}}"
            ]
        );
        assert_eq!(
            errors("ids", json!(1.5)),
            [
                "{'type': 'value_error', 'loc': ('body', 'f'), 'msg': 'Value error, must be list or null; got float', 'input': 1.5, 'ctx': {'error': ValueError('must be list or null; got float')}}"
            ]
        );
        assert_eq!(
            errors("ids", json!([[1], 2])),
            [
                "{'type': 'value_error', 'loc': ('body', 'f'), 'msg': 'Value error, row 1: must be list; got int', 'input': [[1], 2], 'ctx': {'error': ValueError('row 1: must be list; got int')}}"
            ]
        );
        assert_eq!(
            errors("ids", json!([1.5])),
            [
                "{'type': 'value_error', 'loc': ('body', 'f'), 'msg': 'Value error, elements must be int or list; got float', 'input': [1.5], 'ctx': {'error': ValueError('elements must be int or list; got float')}}"
            ]
        );
        assert!(errors("int", json!(u64::MAX)).is_empty());
    }

    /// What lax mode admits, from the same Pydantic: strings of ints and floats, bools as numbers, Pydantic's
    /// words for booleans, `0`/`1` and `0.0`/`1.0` as booleans, and a union that any member admits.
    #[test]
    fn lax_mode_admits_what_pydantic_admits() {
        let admitted = |ty: &str, value: Value| errors(ty, value.clone()).is_empty();
        for v in [
            json!("3"),
            json!(" 3"),
            json!("3.0"),
            json!("1_000"),
            json!("+3"),
            json!(3.0),
            json!(true),
            json!(9.2e18),
        ] {
            assert!(admitted("int", v.clone()), "int {v}");
        }
        for v in [
            json!("0x10"),
            json!(""),
            json!("1e3"),
            json!("3.5"),
            json!("x.0"),
            json!(".0"),
            json!("3."),
            json!(2.5),
            json!(9.3e18),
            json!(null),
            json!([1]),
        ] {
            assert!(!admitted("int", v.clone()), "int {v}");
        }
        for v in [
            json!(1.0),
            json!(0),
            json!("TRUE"),
            json!("Yes"),
            json!("off"),
            json!("f"),
        ] {
            assert!(admitted("bool", v.clone()), "bool {v}");
        }
        for v in [json!(" true"), json!("2"), json!(0.5), json!(2)] {
            assert!(!admitted("bool", v.clone()), "bool {v}");
        }
        for v in [
            json!("1.5"),
            json!(" 1.5"),
            json!("nan"),
            json!("inf"),
            json!("1_0"),
            json!(true),
        ] {
            assert!(admitted("float", v.clone()), "float {v}");
        }
        assert!(!admitted("float", json!("x")));
        assert!(admitted(
            "nullable[union[list[list[list[float]]],list[list[float]]]]",
            json!([[true, "1.5"]])
        ));
        assert!(admitted("ids", json!([[1, true], [2]])));
        assert!(admitted("ids", json!([])));
    }
}
