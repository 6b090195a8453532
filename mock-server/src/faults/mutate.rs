//! The byte-level mutations of normal response bodies. Body faults never slow the normal encoder: the response
//! is encoded as usual, then the few bytes a fault changes are spliced (which is also how bare `NaN` and
//! `Infinity` literals get into a body), found by a small scanner that knows where a JSON value ends.

use serde_json::Value;

use super::BodyFault;
use mock_core::wire::{base64_i32, decode_base64_i32};

/// Apply a body fault to an encoded body: one object, or an array of objects (a batch).
pub(super) fn mutate_body(fault: &BodyFault, body: &[u8]) -> Vec<u8> {
    if body.first() == Some(&b'[') {
        let elements = split_array(body, 0);
        let mut out = Vec::with_capacity(body.len() + 16);
        out.push(b'[');
        for (i, (start, end)) in elements.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&mutate_object(fault, &body[start..end]));
        }
        out.push(b']');
        out
    } else {
        mutate_object(fault, body)
    }
}

/// Apply a body fault to one `{"text", "output_ids", "meta_info"}` object. An object without the part the
/// fault changes (no `meta_info`, no `output_token_logprobs`, no whole entry at the position) is left alone.
pub(super) fn mutate_object(fault: &BodyFault, obj: &[u8]) -> Vec<u8> {
    let edited = match fault {
        BodyFault::MissingMetaInfo => remove_key(obj, 0, "meta_info"),
        BodyFault::MissingLogprobs => find_key(obj, 0, "meta_info").and_then(|meta| {
            find_key(obj, meta.value_start, "output_token_logprobs")?;
            remove_key(obj, meta.value_start, "output_token_logprobs")
        }),
        BodyFault::ShortLogprobs { by } => edit_triples(obj, |triples| {
            triples.truncate(triples.len().saturating_sub(*by as usize));
            true
        }),
        BodyFault::LongLogprobs { by } => edit_triples(obj, |triples| {
            let extra = triples
                .last()
                .cloned()
                .unwrap_or_else(|| vec![b"-0.5".to_vec(), b"0".to_vec(), b"null".to_vec()]);
            for _ in 0..*by {
                triples.push(extra.clone());
            }
            true
        }),
        BodyFault::NullLogprob { at } => edit_entry(obj, *at, |triple| {
            triple[0] = b"null".to_vec();
        }),
        BodyFault::NanLogprob { at, value } => edit_entry(obj, *at, |triple| {
            triple[0] = value.literal().as_bytes().to_vec();
        }),
        BodyFault::PositiveLogprob { at, value } => edit_entry(obj, *at, |triple| {
            triple[0] = value.as_str().as_bytes().to_vec();
        }),
        BodyFault::StringLogprob { at } => edit_entry(obj, *at, |triple| {
            let mut quoted = b"\"".to_vec();
            quoted.extend_from_slice(&triple[0]);
            quoted.push(b'"');
            triple[0] = quoted;
        }),
        BodyFault::WrongTokenId { at } => edit_entry(obj, *at, |triple| {
            let id: u64 = std::str::from_utf8(&triple[1])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            triple[1] = (if id == 0 { 1 } else { id - 1 }).to_string().into_bytes();
        }),
        BodyFault::DropChannel { channel } => find_key(obj, 0, "meta_info").and_then(|meta| {
            let mut out: Option<Vec<u8>> = None;
            for key in channel.keys() {
                let current = out.as_deref().unwrap_or(obj);
                if let Some(edited) = remove_key(current, meta.value_start, key) {
                    out = Some(edited);
                }
            }
            out
        }),
        BodyFault::ShortRoutes { by } => edit_routes(obj, |rows| {
            rows.truncate(rows.len().saturating_sub(*by as usize));
        }),
        BodyFault::ExtraRoute => edit_routes(obj, |rows| {
            if let Some(last) = rows.last().cloned() {
                rows.push(last);
            }
        }),
        BodyFault::RetractRoutes => edit_routes(obj, |rows| {
            rows.iter_mut().flatten().for_each(|e| *e ^= 1);
        }),
        BodyFault::SpansGap => edit_last_span(obj, delay_start),
        BodyFault::SpansOverlap => edit_meta(obj, "weight_versions", |spans| {
            let spans = spans.as_array_mut()?;
            let mut again = spans.last()?.clone();
            let end = again["end"].as_i64().filter(|&end| end > 0)?;
            again["start"] = Value::from(end - 1);
            spans.push(again);
            Some(())
        }),
        BodyFault::StaleVersion => edit_last_span(obj, |span| {
            span["version"] = Value::from("stale");
            true
        }),
        BodyFault::MaskMissingToken { at } => output_ids(obj).and_then(|ids| {
            let i = (*at as usize).min(ids.len().checked_sub(1)?);
            let token = ids[i];
            edit_meta(obj, "output_token_sampling_mask", |masks| {
                let row = masks.as_array_mut()?.get_mut(i)?.as_array_mut()?;
                let before = row.len();
                row.retain(|id| id.as_u64() != Some(token));
                (row.len() != before).then_some(())
            })
        }),
        BodyFault::TwoElementLogprobs => edit_triples(obj, |triples| {
            triples.iter_mut().for_each(|t| t.truncate(2));
            !triples.is_empty()
        }),
        BodyFault::PhantomLogprob => match output_ids(obj) {
            Some(ids) if ids.is_empty() => edit_triples(obj, |triples| {
                triples.push(vec![b"-0.5".to_vec(), b"0".to_vec(), b"null".to_vec()]);
                true
            }),
            _ => None,
        },
    };
    edited.unwrap_or_else(|| obj.to_vec())
}

/// The object's `output_ids`, when it has them.
fn output_ids(obj: &[u8]) -> Option<Vec<u64>> {
    let ids = find_key(obj, 0, "output_ids")?;
    serde_json::from_slice(&obj[ids.value_start..ids.value_end]).ok()
}

/// Rewrites the value of `meta_info.<key>` through `edit`, parsed (channel faults are off the hot path);
/// `None` when the key is absent or `edit` declines.
fn edit_meta(
    obj: &[u8],
    key: &str,
    edit: impl FnOnce(&mut Value) -> Option<()>,
) -> Option<Vec<u8>> {
    let meta = find_key(obj, 0, "meta_info")?;
    let span = find_key(obj, meta.value_start, key)?;
    let mut value: Value = serde_json::from_slice(&obj[span.value_start..span.value_end]).ok()?;
    edit(&mut value)?;
    let mut out = Vec::with_capacity(obj.len() + 16);
    out.extend_from_slice(&obj[..span.value_start]);
    out.extend_from_slice(&serde_json::to_vec(&value).ok()?);
    out.extend_from_slice(&obj[span.value_end..]);
    Some(out)
}

/// Rewrites `meta_info.routed_experts` as rows (counted from position 0: `prompt_tokens + output - 1`).
fn edit_routes(obj: &[u8], edit: impl FnOnce(&mut Vec<Vec<i32>>)) -> Option<Vec<u8>> {
    let meta = find_key(obj, 0, "meta_info")?;
    let prompt = find_key(obj, meta.value_start, "prompt_tokens")?;
    let prompt: usize = std::str::from_utf8(&obj[prompt.value_start..prompt.value_end])
        .ok()?
        .parse()
        .ok()?;
    let positions = (prompt + output_ids(obj)?.len()).checked_sub(1)?;
    edit_meta(obj, "routed_experts", |routes| {
        let values = decode_base64_i32(routes.as_str()?)?;
        let row_len = values.len().checked_div(positions).filter(|&n| n > 0)?;
        let mut rows: Vec<Vec<i32>> = values.chunks(row_len).map(<[i32]>::to_vec).collect();
        edit(&mut rows);
        *routes = Value::from(base64_i32(&rows.concat()));
        Some(())
    })
}

/// Rewrites the last span of `meta_info.weight_versions`.
fn edit_last_span(obj: &[u8], edit: impl FnOnce(&mut Value) -> bool) -> Option<Vec<u8>> {
    edit_meta(obj, "weight_versions", |spans| {
        let last = spans.as_array_mut()?.last_mut()?;
        edit(last).then_some(())
    })
}

/// Starts a span one token late, when it covers a token to start late on.
fn delay_start(span: &mut Value) -> bool {
    match (span["start"].as_i64(), span["end"].as_i64()) {
        (Some(start), Some(end)) if start < end => {
            span["start"] = Value::from(start + 1);
            true
        }
        _ => false,
    }
}

/// One `[logprob, token_id, text]` entry: each element's JSON bytes.
type Triple = Vec<Vec<u8>>;

/// Edit the entry at output position `at` (the last one when past the end), if there is a whole one.
fn edit_entry(obj: &[u8], at: u64, edit: impl FnOnce(&mut Triple)) -> Option<Vec<u8>> {
    edit_triples(obj, |triples| {
        let i = (at as usize).min(triples.len().saturating_sub(1));
        match triples.get_mut(i) {
            Some(triple) if triple.len() >= 3 => {
                edit(triple);
                true
            }
            _ => false,
        }
    })
}

/// Rewrite `meta_info.output_token_logprobs` through `edit`; `None` when the list is absent or `edit` changed
/// nothing.
fn edit_triples(obj: &[u8], edit: impl FnOnce(&mut Vec<Triple>) -> bool) -> Option<Vec<u8>> {
    let meta = find_key(obj, 0, "meta_info")?;
    let lps = find_key(obj, meta.value_start, "output_token_logprobs")?;
    let list = &obj[lps.value_start..lps.value_end];
    let mut triples: Vec<Triple> = split_array(list, 0)
        .into_iter()
        .map(|(s, e)| {
            split_array(&list[s..e], 0)
                .into_iter()
                .map(|(a, b)| list[s..e][a..b].to_vec())
                .collect()
        })
        .collect();
    if !edit(&mut triples) {
        return None;
    }
    let mut list_out = Vec::with_capacity(list.len() + 16);
    list_out.push(b'[');
    for (i, triple) in triples.iter().enumerate() {
        if i > 0 {
            list_out.push(b',');
        }
        list_out.push(b'[');
        list_out.extend_from_slice(&triple.join(&b","[..]));
        list_out.push(b']');
    }
    list_out.push(b']');
    let mut out = Vec::with_capacity(obj.len() + 16);
    out.extend_from_slice(&obj[..lps.value_start]);
    out.extend_from_slice(&list_out);
    out.extend_from_slice(&obj[lps.value_end..]);
    Some(out)
}

/// The byte span of one key and its value inside a JSON object.
#[derive(Debug, Clone, Copy)]
struct KeySpan {
    key_start: usize,
    value_start: usize,
    value_end: usize,
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The end of the JSON value starting at `i` (which must be valid JSON, as our own encoder's output is).
fn value_end(b: &[u8], i: usize) -> usize {
    let i = skip_ws(b, i);
    match b.get(i) {
        Some(b'"') => {
            let mut j = i + 1;
            while j < b.len() {
                match b[j] {
                    b'\\' => j += 2,
                    b'"' => return j + 1,
                    _ => j += 1,
                }
            }
            b.len()
        }
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = value_end(b, j);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return j + 1;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            b.len()
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']') && !b[j].is_ascii_whitespace()
            {
                j += 1;
            }
            j
        }
    }
}

/// The key `key` of the object starting at `obj_start`.
fn find_key(b: &[u8], obj_start: usize, key: &str) -> Option<KeySpan> {
    let mut i = skip_ws(b, obj_start);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b'"') => {}
            _ => return None,
        }
        let key_start = i;
        let key_end = value_end(b, i);
        let name = &b[key_start + 1..key_end - 1];
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(b, i + 1);
        let end = value_end(b, value_start);
        if name == key.as_bytes() {
            return Some(KeySpan {
                key_start,
                value_start,
                value_end: end,
            });
        }
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i += 1,
            _ => return None,
        }
    }
}

/// The object with `key` (of the object at `obj_start`) removed, together with its separating comma.
fn remove_key(b: &[u8], obj_start: usize, key: &str) -> Option<Vec<u8>> {
    let span = find_key(b, obj_start, key)?;
    let before = b[..span.key_start]
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())?;
    let (cut_from, cut_to) = if b[before] == b',' {
        (before, span.value_end)
    } else {
        // The first key: drop the comma after it instead.
        let after = skip_ws(b, span.value_end);
        let to = if b.get(after) == Some(&b',') {
            after + 1
        } else {
            span.value_end
        };
        (span.key_start, to)
    };
    let mut out = Vec::with_capacity(b.len());
    out.extend_from_slice(&b[..cut_from]);
    out.extend_from_slice(&b[cut_to..]);
    Some(out)
}

/// The spans of the elements of the array starting at `start`.
fn split_array(b: &[u8], start: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = skip_ws(b, start);
    if b.get(i) != Some(&b'[') {
        return out;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b']') {
        return out;
    }
    while i < b.len() {
        let s = skip_ws(b, i);
        let e = value_end(b, s);
        out.push((s, e));
        i = skip_ws(b, e);
        match b.get(i) {
            Some(b',') => i += 1,
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Fault;

    const OBJ: &str = r#"{"text":"ab","output_ids":[5,6],"meta_info":{"id":"r","input_token_logprobs":[],"output_token_logprobs":[[-0.25,5,null],[-1.5,6,"b"]],"completion_tokens":2}}"#;

    fn apply(spec: &str) -> String {
        let Ok(Fault::Body(fault)) = spec.parse() else {
            panic!("{spec} is not a body fault");
        };
        String::from_utf8(mutate_object(&fault, OBJ.as_bytes())).unwrap()
    }
    #[test]
    fn mutations_splice_only_what_they_change() {
        assert_eq!(
            apply("missing-meta-info"),
            r#"{"text":"ab","output_ids":[5,6]}"#
        );
        assert_eq!(
            apply("missing-logprobs"),
            r#"{"text":"ab","output_ids":[5,6],"meta_info":{"id":"r","input_token_logprobs":[],"completion_tokens":2}}"#
        );
        assert!(apply("short-logprobs").contains(r#""output_token_logprobs":[[-0.25,5,null]],"#));
        assert!(
            apply("long-logprobs;by=2")
                .contains(r#"[[-0.25,5,null],[-1.5,6,"b"],[-1.5,6,"b"],[-1.5,6,"b"]]"#)
        );
        assert!(apply("null-logprob;at=1").contains(r#"[[-0.25,5,null],[null,6,"b"]]"#));
        assert!(apply("nan-logprob").contains(r#"[[NaN,5,null],"#));
        assert!(apply("nan-logprob;value=-Infinity").contains(r#"[[-Infinity,5,null],"#));
        assert!(apply("positive-logprob").contains(r#"[[0.5,5,null],"#));
        assert!(apply("wrong-token-id").contains(r#"[[-0.25,4,null],"#));
        assert!(apply("string-logprob;at=9").contains(r#",["-1.5",6,"b"]]"#));
    }
}
