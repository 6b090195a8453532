//! A model's chat template, rendered as transformers' `apply_chat_template` renders it (`MODEL.md` section
//! 13.5).
//!
//! transformers compiles the template with Jinja2 in a sandbox with `trim_blocks`, `lstrip_blocks` and the
//! `loopcontrols` extension, overrides `tojson` with `json.dumps(..., ensure_ascii=False)`, and adds the globals
//! `raise_exception` and `strftime_now` (`transformers/utils/chat_template_utils.py`, `_compile_jinja_template`).
//! minijinja is a Jinja2 implementation in Rust; `minijinja-contrib`'s `pycompat` supplies the Python string and
//! dict methods templates call, and the pieces below make what a template prints read as Python prints it:
//! `None`, `True`, float `repr`, and `json.dumps`' spacing and escapes.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value as JValue, ValueKind};
use minijinja::{Environment, Error, ErrorKind};
use serde_json::{Map, Value};

use super::loading::SpecialTokenStrings;
use crate::pyfmt::{float_repr, str_repr};

/// The name the template is registered under.
const NAME: &str = "chat_template";

/// A compiled chat template and the special-token strings it renders with.
pub struct ChatTemplate {
    env: Environment<'static>,
    tokens: SpecialTokenStrings,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; the error is minijinja's message, with the line it points at.
    pub fn new(source: String, tokens: SpecialTokenStrings) -> Result<ChatTemplate, String> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(|out, _state, value| {
            out.write_str(&py_str(value))
                .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
        });
        env.add_filter("tojson", tojson);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<JValue, Error> {
                Err(Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_function("strftime_now", |format: String| -> String {
            jiff::Zoned::now().strftime(&format).to_string()
        });
        env.add_template_owned(NAME, source)
            .map_err(|e| describe(&e))?;
        Ok(ChatTemplate { env, tokens })
    }

    /// Renders `messages` (a list of message objects) with `tools` (a list, or none) as transformers'
    /// `apply_chat_template(messages, tools=tools, add_generation_prompt=..., tokenize=False, **kwargs)` does:
    /// the special-token strings first, then `kwargs` on top of them. The error is the template's own
    /// `raise_exception` message, or minijinja's description of what failed.
    pub fn render(
        &self,
        messages: &Value,
        tools: Option<&Value>,
        add_generation_prompt: bool,
        kwargs: &Map<String, Value>,
    ) -> Result<String, String> {
        let mut context = Map::new();
        let tokens = [
            ("bos_token", &self.tokens.bos_token),
            ("eos_token", &self.tokens.eos_token),
            ("unk_token", &self.tokens.unk_token),
            ("pad_token", &self.tokens.pad_token),
        ];
        for (name, token) in tokens {
            if let Some(token) = token {
                context.insert(name.into(), Value::String(token.clone()));
            }
        }
        for (key, value) in kwargs {
            context.insert(key.clone(), value.clone());
        }
        context.insert("messages".into(), messages.clone());
        context.insert("tools".into(), tools.cloned().unwrap_or(Value::Null));
        context.insert("documents".into(), Value::Null);
        context.insert(
            "add_generation_prompt".into(),
            Value::Bool(add_generation_prompt),
        );
        let template = self.env.get_template(NAME).map_err(|e| describe(&e))?;
        template
            .render(JValue::from_serialize(&context))
            .map_err(|e| describe(&e))
    }
}

/// An error's message with its causes, as one line.
fn describe(error: &Error) -> String {
    if error.kind() == ErrorKind::InvalidOperation
        && let Some(detail) = error.detail()
    {
        // `raise_exception`'s message, as transformers raises it (`TemplateError(message)`).
        return detail.to_owned();
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

/// `str(value)` as Python prints it inside `{{ }}`: `None`, `True`, a float's `repr`, lists and dicts as their
/// `repr`.
#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "a template value's kind: every other kind is written as Python would"
)]
fn py_str(value: &JValue) -> String {
    match value.kind() {
        ValueKind::String => value.as_str().unwrap_or_default().to_owned(),
        ValueKind::Undefined => String::new(),
        _ => py_repr(value),
    }
}

/// `repr(value)`: strings quoted as Python quotes them.
#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "a template value's kind: every other kind is written as Python would"
)]
fn py_repr(value: &JValue) -> String {
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => "None".into(),
        ValueKind::Bool => if value.is_true() { "True" } else { "False" }.into(),
        ValueKind::String => str_repr(value.as_str().unwrap_or_default()),
        ValueKind::Number => match f64::try_from(value.clone()) {
            Ok(x) if value.as_i64().is_none() => float_repr(x),
            _ => value.to_string(),
        },
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<String> = value
                .try_iter()
                .map(|items| items.map(|v| py_repr(&v)).collect())
                .unwrap_or_default();
            format!("[{}]", items.join(", "))
        }
        ValueKind::Map => {
            let items: Vec<String> = value
                .try_iter()
                .map(|keys| {
                    keys.map(|k| {
                        let v = value.get_item(&k).unwrap_or_default();
                        format!("{}: {}", py_repr(&k), py_repr(&v))
                    })
                    .collect()
                })
                .unwrap_or_default();
            format!("{{{}}}", items.join(", "))
        }
        _ => value.to_string(),
    }
}

/// transformers' `tojson` filter: `json.dumps(value, ensure_ascii=False, indent=indent, separators=separators,
/// sort_keys=sort_keys)`.
fn tojson(value: JValue, kwargs: Kwargs) -> Result<JValue, Error> {
    let indent: Option<JValue> = kwargs.get("indent")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => Some(" ".repeat(usize::try_from(v).map_err(|_| {
                Error::new(ErrorKind::InvalidOperation, "indent must be an integer")
            })?)),
        },
    };
    let (item_sep, key_sep) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "separators must be a pair of strings",
            ));
        }
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let dumps = PyDumps {
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    let mut out = String::new();
    dumps.write(&json, 0, &mut out);
    Ok(JValue::from_safe_string(out))
}

/// Python's `json.dumps` settings.
struct PyDumps {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

impl PyDumps {
    fn write(&self, value: &Value, level: usize, out: &mut String) {
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => {
                    let _ = write!(out, "{i}");
                }
                (_, Some(u), _) => {
                    let _ = write!(out, "{u}");
                }
                (_, _, Some(x)) => out.push_str(&float_repr(x)),
                _ => out.push_str(&n.to_string()),
            },
            Value::String(s) => self.string(s, out),
            Value::Array(items) if items.is_empty() => out.push_str("[]"),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    self.separate(i, level + 1, out);
                    self.write(item, level + 1, out);
                }
                self.close(level, out);
                out.push(']');
            }
            Value::Object(map) if map.is_empty() => out.push_str("{}"),
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(b.0));
                }
                out.push('{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    self.separate(i, level + 1, out);
                    self.string(key, out);
                    out.push_str(&self.key_sep);
                    self.write(item, level + 1, out);
                }
                self.close(level, out);
                out.push('}');
            }
        }
    }

    /// Before item `i` of a container at depth `level`: the item separator after the first, then the new line
    /// and indent of an indented dump.
    fn separate(&self, i: usize, level: usize, out: &mut String) {
        match &self.indent {
            Some(indent) => {
                if i > 0 {
                    out.push_str(self.item_sep.trim_end_matches(' '));
                }
                out.push('\n');
                out.push_str(&indent.repeat(level));
            }
            None => {
                if i > 0 {
                    out.push_str(&self.item_sep);
                }
            }
        }
    }

    fn close(&self, level: usize, out: &mut String) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            out.push_str(&indent.repeat(level));
        }
    }

    /// A JSON string as Python writes it: `"`, `\` and the control characters escaped (`\n`, `\r`, `\t`, `\b`,
    /// `\f`, the rest as `\u00xx`), everything else as is, or as `\uxxxx` (surrogate pairs above the BMP) with
    /// `ensure_ascii`.
    fn string(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c if self.ensure_ascii && !c.is_ascii() => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumps(value: Value, indent: Option<&str>) -> String {
        let dumps = PyDumps {
            indent: indent.map(str::to_owned),
            item_sep: if indent.is_some() { "," } else { ", " }.into(),
            key_sep: ": ".into(),
            sort_keys: false,
            ensure_ascii: false,
        };
        let mut out = String::new();
        dumps.write(&value, 0, &mut out);
        out
    }

    /// Expected strings are what Python 3.11 prints for `json.dumps(value, ensure_ascii=False[, indent=2])`.
    #[test]
    fn json_dumps_spacing_escapes_and_floats_are_pythons() {
        let value = serde_json::json!({"b": [1, 2.5, 1e-5, 1e20, true, null], "a": "é\n\"\u{1}\u{7f}", "e": {}});
        assert_eq!(
            dumps(value.clone(), None),
            r#"{"b": [1, 2.5, 1e-05, 1e+20, true, null], "a": "é\n\"\u0001"#.to_owned()
                + "\u{7f}\", \"e\": {}}"
        );
        assert_eq!(
            dumps(serde_json::json!({"k": [1, {"x": []}]}), Some("  ")),
            "{\n  \"k\": [\n    1,\n    {\n      \"x\": []\n    }\n  ]\n}"
        );
    }

    fn template(source: &str) -> ChatTemplate {
        ChatTemplate::new(
            source.into(),
            SpecialTokenStrings {
                eos_token: Some("<|im_end|>".into()),
                ..SpecialTokenStrings::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn python_values_print_as_python_prints_them() {
        let t = template("{{ none }} {{ yes }} {{ x }} {{ xs }} {{ eos_token }}{{ bos_token }}");
        let kwargs = serde_json::json!({"none": null, "yes": true, "x": 1.0, "xs": ["a", 1]});
        let out = t
            .render(
                &serde_json::json!([]),
                None,
                true,
                kwargs.as_object().unwrap(),
            )
            .unwrap();
        assert_eq!(out, "None True 1.0 ['a', 1] <|im_end|>");
    }

    /// A tool's keys reach `tojson` and `.items()` in the request's order, as in a Python dict: Python prints
    /// `{"type": "function", "function": {"name": "f", "description": "d"}}` and `type,function`.
    #[test]
    fn maps_keep_the_order_the_request_gave() {
        let t = template(
            "{{ tools[0] | tojson }} {% for k, v in tools[0].items() %}{{ k }},{% endfor %}",
        );
        let tools = serde_json::json!([{"type": "function", "function": {"name": "f", "description": "d"}}]);
        let out = t
            .render(&serde_json::json!([]), Some(&tools), false, &Map::new())
            .unwrap();
        assert_eq!(
            out,
            r#"{"type": "function", "function": {"name": "f", "description": "d"}} type,function,"#
        );
    }

    #[test]
    fn raise_exception_is_the_error_and_blocks_are_trimmed() {
        let t = template(
            "{% for m in messages %}\n  {% if m.role == 'bad' %}{{ raise_exception('no ' + m.role) }}{% endif %}\n{{ m.content.strip() }}|\n{% endfor %}",
        );
        let ok = t
            .render(
                &serde_json::json!([{"role": "user", "content": " hi "}]),
                None,
                false,
                &Map::new(),
            )
            .unwrap();
        assert_eq!(ok, "hi|\n");
        let err = t
            .render(
                &serde_json::json!([{"role": "bad", "content": ""}]),
                None,
                false,
                &Map::new(),
            )
            .unwrap_err();
        assert_eq!(err, "no bad");
    }
}
