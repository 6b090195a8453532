//! The body faults of the catalogue on OpenAI answers. An OpenAI body has no `meta_info` and no token ids, so
//! each fault lands on its nearest OpenAI counterpart:
//!
//! | fault | OpenAI answer |
//! |---|---|
//! | `missing-meta-info` | no `usage` and no `metadata` |
//! | `missing-logprobs` | a choice's `logprobs` is `null` |
//! | `short-logprobs` / `long-logprobs` | `by` entries fewer / more (the last repeated) in every per-token list |
//! | `null-logprob`, `nan-logprob`, `positive-logprob`, `string-logprob` | the logprob at `at`, as on `/generate` |
//! | `wrong-token-id` | the token text at `at` is another token's |

use serde_json::{Value, json};

use crate::faults::{Fault, FaultKind};

/// A raw JSON token travels inside a string wrapped in this marker, and is unwrapped by [`write`].
const RAW: &str = "\u{1}raw\u{1}";
/// How the marker reads once serde_json has escaped it.
const RAW_ESCAPED: &str = "\\u0001raw\\u0001";

/// The text given to the token at `at` by `wrong-token-id`.
pub(crate) const WRONG_TOKEN: &str = "<|wrong-token|>";

/// Apply a body fault to an OpenAI body or chunk; other kinds leave it alone. Only choices that carry
/// logprobs are touched by the logprob faults.
pub(crate) fn mutate(fault: &Fault, value: &mut Value) {
    if fault.kind == FaultKind::MissingMetaInfo {
        if let Some(obj) = value.as_object_mut() {
            obj.remove("usage");
            obj.remove("metadata");
        }
        return;
    }
    let Some(choices) = value.get_mut("choices").and_then(Value::as_array_mut) else {
        return;
    };
    for choice in choices {
        let Some(logprobs) = choice.get_mut("logprobs").filter(|l| !l.is_null()) else {
            continue;
        };
        match fault.kind {
            FaultKind::MissingLogprobs => *logprobs = Value::Null,
            FaultKind::ShortLogprobs | FaultKind::LongLogprobs => resize(fault, logprobs),
            _ => mutate_entry(fault, logprobs),
        }
    }
}

/// Serialise an answer, writing the raw tokens the faults asked for (a bare `NaN`, a number as a string).
pub(crate) fn write(value: &Value) -> Vec<u8> {
    let json = serde_json::to_string(value).unwrap_or_default();
    let mut out = String::with_capacity(json.len());
    let mut rest = json.as_str();
    let open = format!("\"{RAW_ESCAPED}");
    while let Some(start) = rest.find(&open) {
        out.push_str(&rest[..start]);
        let after = &rest[start + open.len()..];
        match after.find('"') {
            Some(end) => {
                out.push_str(&after[..end]);
                rest = &after[end + 1..];
            }
            None => {
                rest = &rest[start..];
                break;
            }
        }
    }
    out.push_str(rest);
    out.into_bytes()
}

fn raw(token: &str) -> Value {
    json!(format!("{RAW}{token}"))
}

/// The per-token lists: chat's `content`, or the completion arrays.
fn token_lists(logprobs: &mut Value) -> Vec<&mut Vec<Value>> {
    match logprobs.as_object_mut() {
        Some(obj) => obj.values_mut().filter_map(Value::as_array_mut).collect(),
        None => Vec::new(),
    }
}

fn resize(fault: &Fault, logprobs: &mut Value) {
    let by = fault.u64("by", 1) as usize;
    for list in token_lists(logprobs) {
        if fault.kind == FaultKind::ShortLogprobs {
            list.truncate(list.len().saturating_sub(by));
        } else if let Some(last) = list.last().cloned() {
            list.extend(std::iter::repeat_n(last, by));
        }
    }
}

/// The logprob (or token) at `at`: chat's `content[at]`, or position `at` of the completion arrays.
fn mutate_entry(fault: &Fault, logprobs: &mut Value) {
    let at = fault.u64("at", 0) as usize;
    let slot = if logprobs.get("content").is_some() {
        let Some(entry) = logprobs.get_mut("content").and_then(|c| c.get_mut(at)) else {
            return;
        };
        if fault.kind == FaultKind::WrongTokenId {
            entry["token"] = json!(WRONG_TOKEN);
            entry["bytes"] = json!(WRONG_TOKEN.as_bytes());
            return;
        }
        entry.get_mut("logprob")
    } else {
        let key = if fault.kind == FaultKind::WrongTokenId {
            "tokens"
        } else {
            "token_logprobs"
        };
        logprobs.get_mut(key).and_then(|list| list.get_mut(at))
    };
    let Some(slot) = slot else {
        return;
    };
    *slot = match fault.kind {
        FaultKind::WrongTokenId => json!(WRONG_TOKEN),
        FaultKind::NullLogprob => Value::Null,
        FaultKind::NanLogprob => raw(fault.str("value").unwrap_or("NaN")),
        FaultKind::PositiveLogprob => raw(fault.str("value").unwrap_or("0.5")),
        FaultKind::StringLogprob => json!(slot.to_string()),
        _ => return,
    };
}
