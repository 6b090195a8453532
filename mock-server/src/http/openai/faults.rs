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
//! | `drop-channel;channel=weight_versions`, `spans-gap`, `spans-overlap`, `stale-version` | the same on `metadata.weight_versions` |
//! | `drop-channel` (routes), `routes-short`, `routes-extra-row`, `retract-routes` | the same on `sglext.routed_experts` (an `sglext` left empty goes) |
//! | `drop-channel;channel=sampling_mask`, `mask-missing-token`, `two-element-logprobs`, `phantom-logprob` | none: the OpenAI answers carry no masks or triples |

use serde_json::{Value, json};

use crate::faults::{BodyFault, Channel};
use crate::wire::{base64_i32, decode_base64_i32};

/// A raw JSON token travels inside a string wrapped in this marker, and is unwrapped by [`write`].
const RAW: &str = "\u{1}raw\u{1}";
/// How the marker reads once serde_json has escaped it.
const RAW_ESCAPED: &str = "\\u0001raw\\u0001";

/// The text given to the token at `at` by `wrong-token-id`.
pub(crate) const WRONG_TOKEN: &str = "<|wrong-token|>";

/// Apply a body fault to an OpenAI body or chunk, in one exhaustive match: each fault goes to the part of the
/// answer it lands on (the table above). Only choices that carry logprobs are touched by the logprob faults;
/// `routes_row_len` is a routes row's length (`num_hidden_layers * num_experts_per_tok`).
pub(crate) fn mutate(fault: &BodyFault, value: &mut Value, routes_row_len: usize) {
    match fault {
        BodyFault::MissingMetaInfo => {
            if let Some(obj) = value.as_object_mut() {
                obj.remove("usage");
                obj.remove("metadata");
            }
        }
        BodyFault::MissingLogprobs => each_logprobs(value, |logprobs| *logprobs = Value::Null),
        BodyFault::ShortLogprobs { by } => {
            each_logprobs(value, |logprobs| resize(logprobs, *by as usize, true));
        }
        BodyFault::LongLogprobs { by } => {
            each_logprobs(value, |logprobs| resize(logprobs, *by as usize, false));
        }
        BodyFault::NullLogprob { at } => {
            each_logprobs(value, |logprobs| {
                set_logprob(logprobs, *at, |_| Value::Null)
            });
        }
        BodyFault::NanLogprob { at, value: literal } => each_logprobs(value, |logprobs| {
            set_logprob(logprobs, *at, |_| raw(literal.literal()));
        }),
        BodyFault::PositiveLogprob { at, value: number } => each_logprobs(value, |logprobs| {
            set_logprob(logprobs, *at, |_| raw(number.as_str()));
        }),
        BodyFault::StringLogprob { at } => each_logprobs(value, |logprobs| {
            set_logprob(logprobs, *at, |slot| json!(slot.to_string()));
        }),
        BodyFault::WrongTokenId { at } => {
            each_logprobs(value, |logprobs| wrong_token(logprobs, *at))
        }
        BodyFault::DropChannel {
            channel: Channel::RoutedExperts,
        } => drop_routes(value),
        BodyFault::DropChannel {
            channel: Channel::WeightVersions,
        } => {
            if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("weight_versions");
            }
        }
        BodyFault::ShortRoutes { by } => edit_routes(value, |values| {
            values.truncate(values.len().saturating_sub(*by as usize * routes_row_len));
            true
        }),
        // A row to repeat needs a row.
        BodyFault::ExtraRoute => edit_routes(value, |values| {
            let enough = values.len() >= routes_row_len;
            if enough {
                values.extend_from_within(values.len() - routes_row_len..);
            }
            enough
        }),
        BodyFault::RetractRoutes => edit_routes(value, |values| {
            values.iter_mut().for_each(|e| *e ^= 1);
            true
        }),
        BodyFault::SpansGap => edit_spans(value, |spans| last_start(spans, 1)),
        BodyFault::SpansOverlap => edit_spans(value, |spans| {
            if let Some(list) = spans.as_array_mut()
                && let Some(mut again) = list.last().cloned()
                && let Some(end) = again["end"].as_i64().filter(|&end| end > 0)
            {
                again["start"] = json!(end - 1);
                list.push(again);
            }
        }),
        BodyFault::StaleVersion => edit_spans(value, |spans| {
            if let Some(span) = spans.as_array_mut().and_then(|s| s.last_mut()) {
                span["version"] = json!("stale");
            }
        }),
        // No OpenAI counterpart: the OpenAI answers carry no sampling masks and no logprob triples.
        BodyFault::DropChannel {
            channel: Channel::SamplingMask,
        }
        | BodyFault::MaskMissingToken { .. }
        | BodyFault::TwoElementLogprobs
        | BodyFault::PhantomLogprob => {}
    }
}

/// `edit` on the `logprobs` of every choice that carries them.
fn each_logprobs(value: &mut Value, mut edit: impl FnMut(&mut Value)) {
    let Some(choices) = value.get_mut("choices").and_then(Value::as_array_mut) else {
        return;
    };
    for choice in choices {
        if let Some(logprobs) = choice.get_mut("logprobs").filter(|l| !l.is_null()) {
            edit(logprobs);
        }
    }
}

/// `edit` on `metadata.weight_versions`, when the answer has them.
fn edit_spans(value: &mut Value, edit: impl FnOnce(&mut Value)) {
    if let Some(spans) = value
        .get_mut("metadata")
        .and_then(|m| m.get_mut("weight_versions"))
    {
        edit(spans);
    }
}

/// The last span starts `by` tokens later (or earlier), as long as it stays a span.
fn last_start(spans: &mut Value, by: i64) {
    if let Some(span) = spans.as_array_mut().and_then(|s| s.last_mut())
        && let Some(start) = span["start"].as_i64()
        && (0..=span["end"].as_i64().unwrap_or(-1)).contains(&(start + by))
    {
        span["start"] = json!(start + by);
    }
}

/// `sglext.routed_experts` dropped, and `sglext` with it when nothing else is left.
fn drop_routes(value: &mut Value) {
    let Some(sglext) = value.get_mut("sglext").and_then(Value::as_object_mut) else {
        return;
    };
    sglext.remove("routed_experts");
    if sglext.is_empty()
        && let Some(obj) = value.as_object_mut()
    {
        obj.remove("sglext");
    }
}

/// `edit` on the expert ids of `sglext.routed_experts`, written back when it says it changed them.
fn edit_routes(value: &mut Value, edit: impl FnOnce(&mut Vec<i32>) -> bool) {
    let Some(routes) = value
        .get_mut("sglext")
        .and_then(|sglext| sglext.get_mut("routed_experts"))
    else {
        return;
    };
    let Some(mut values) = routes.as_str().and_then(decode_base64_i32) else {
        return;
    };
    if edit(&mut values) {
        *routes = json!(base64_i32(&values));
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

fn resize(logprobs: &mut Value, by: usize, shorter: bool) {
    for list in token_lists(logprobs) {
        if shorter {
            list.truncate(list.len().saturating_sub(by));
        } else if let Some(last) = list.last().cloned() {
            list.extend(std::iter::repeat_n(last, by));
        }
    }
}

/// The logprob at `at`: chat's `content[at].logprob`, or position `at` of the completion's `token_logprobs`.
fn set_logprob(logprobs: &mut Value, at: u64, value: impl FnOnce(&Value) -> Value) {
    let at = at as usize;
    let slot = if logprobs.get("content").is_some() {
        logprobs
            .get_mut("content")
            .and_then(|c| c.get_mut(at))
            .and_then(|entry| entry.get_mut("logprob"))
    } else {
        logprobs
            .get_mut("token_logprobs")
            .and_then(|list| list.get_mut(at))
    };
    if let Some(slot) = slot {
        *slot = value(slot);
    }
}

/// The token at `at` is another token's: chat's `content[at]` (its `token` and `bytes`), or position `at` of
/// the completion's `tokens`.
fn wrong_token(logprobs: &mut Value, at: u64) {
    let at = at as usize;
    if logprobs.get("content").is_some() {
        if let Some(entry) = logprobs.get_mut("content").and_then(|c| c.get_mut(at)) {
            entry["token"] = json!(WRONG_TOKEN);
            entry["bytes"] = json!(WRONG_TOKEN.as_bytes());
        }
    } else if let Some(slot) = logprobs.get_mut("tokens").and_then(|list| list.get_mut(at)) {
        *slot = json!(WRONG_TOKEN);
    }
}
