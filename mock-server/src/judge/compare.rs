//! What must agree between two answers to the same request, and what may not: the comparison `conform` makes.
//!
//! Compared: the status; the content type; every object's keys and their order, at every level; the JSON type
//! of every value (an integer is not a float, `null` is not absent); array lengths (the corpus pins every
//! length: `ignore_eos` with a token bound); a stream's framing (the sequence of event shapes, consecutive
//! repeats folded, and the last event in full); an error's whole body; and the values the protocol decides
//! rather than the model ([`COUNTED`] numbers, [`NAMED`] strings).
//!
//! Ignored: what the weights or the clock decide: token ids, logprob values, texts, ids, latencies,
//! timestamps, and how many chunks a stream of tokens is cut into.

use serde::Serialize;
use serde_json::Value;

/// Numbers whose values are the protocol's: token counts, positions, indices.
pub const COUNTED: [&str; 8] = [
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "length",
    "index",
    "code",
];

/// Counts that a scenario's clock decides (how many tokens ran before an abort; which item of a batch
/// streamed first): compared only in answers that are not a scenario's.
pub const TIMED: [&str; 5] = [
    "completion_tokens",
    "total_tokens",
    "cached_tokens",
    "length",
    "index",
];

/// Strings whose values are the protocol's: kinds, roles, finish reasons, the weight version.
pub const NAMED: [&str; 6] = [
    "object",
    "role",
    "finish_reason",
    "type",
    "weight_version",
    "status",
];

/// What a comparison of two values may count as a difference beyond keys and types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    /// Array lengths.
    lengths: bool,
    /// The values of the [`TIMED`] counts.
    counts: bool,
}

impl Mode {
    /// An answer whose lengths the request pins (`ignore_eos` with a bound), or a scenario's, whose lengths
    /// the clock decides.
    fn of(clock: bool) -> Mode {
        Mode {
            lengths: !clock,
            counts: !clock,
        }
    }

    /// Any event of a stream: how many tokens it carries is how the stream was cut into chunks.
    const EVENT: Mode = Mode {
        lengths: false,
        counts: false,
    };
}

/// An answer as `conform` observed it.
#[derive(Debug, Clone)]
pub struct Observed {
    /// `None` when no answer came (the connection failed or timed out): why, in `failure`.
    pub status: Option<u16>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    pub failure: Option<String>,
}

/// One way two answers differ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// `status`, `content-type`, `keys`, `type`, `length`, `value`, `frames`, `error`, `body` or `transport`.
    pub kind: &'static str,
    /// Where: a path into the JSON body (`meta_info.cached_tokens_details`, `choices[].message`), arrays as
    /// `[]`; a stream's last event is `last event`, its framing `events`.
    pub at: String,
    /// What the target (the real release, or its recording) answered there.
    pub target: String,
    /// What the mock answered there.
    pub mock: String,
}

/// Every difference between the target's answer and the mock's.
/// `clock` marks an answer whose length a scenario's timing decides (a stream aborted after a few events):
/// its array lengths and token counts are not compared, its invariants are.
pub fn compare(target: &Observed, mock: &Observed, clock: bool) -> Vec<Difference> {
    let mut out = Vec::new();
    let diff = |kind, at: &str, target: String, mock: String| Difference {
        kind,
        at: at.to_owned(),
        target,
        mock,
    };
    let (Some(status), Some(mock_status)) = (target.status, mock.status) else {
        if target.status.is_some() || mock.status.is_some() || target.failure != mock.failure {
            out.push(diff(
                "transport",
                "",
                describe_transport(target),
                describe_transport(mock),
            ));
        }
        return out;
    };
    if status != mock_status {
        out.push(diff(
            "status",
            "",
            status.to_string(),
            mock_status.to_string(),
        ));
        return out;
    }
    if target.content_type != mock.content_type {
        out.push(diff(
            "content-type",
            "",
            format!("{:?}", target.content_type),
            format!("{:?}", mock.content_type),
        ));
    }
    let error = status >= 400;
    match (Body::of(target), Body::of(mock)) {
        (Body::Json(a), Body::Json(b)) if error => {
            // Compared as written: a JSON object's equality ignores its key order. The directory SGLang is
            // installed in (in a validation error's frame) is the machine's, not the release's.
            let (a, b) = (
                without_install_dir(&a.to_string()),
                without_install_dir(&b.to_string()),
            );
            if a != b {
                out.push(diff("error", "", short(&a), short(&b)));
            }
        }
        (Body::Json(a), Body::Json(b)) => {
            shape("", None, &a, &b, Mode::of(clock), &mut out);
            compare_invariants(&json_invariants(&a), &json_invariants(&b), &mut out);
        }
        (Body::Events(a), Body::Events(b)) => {
            compare_events(&a, &b, clock, &mut out);
            compare_invariants(&event_invariants(&a), &event_invariants(&b), &mut out);
        }
        (Body::Text(a), Body::Text(b)) => {
            if (error && a != b) || (!error && a.is_empty() != b.is_empty()) {
                out.push(diff("body", "", short(&a), short(&b)));
            }
        }
        (a, b) => out.push(diff("body", "", a.kind().to_owned(), b.kind().to_owned())),
    }
    out
}

fn describe_transport(observed: &Observed) -> String {
    match (observed.status, &observed.failure) {
        (Some(status), _) => format!("answered {status}"),
        (None, Some(failure)) => format!("no answer ({failure})"),
        (None, None) => "no answer".to_owned(),
    }
}

/// A body as the comparison reads it.
enum Body {
    Json(Value),
    /// Server-sent events: each `data:` payload, JSON or `[DONE]` (as a string).
    Events(Vec<Value>),
    Text(String),
}

impl Body {
    fn of(observed: &Observed) -> Body {
        let content_type = observed.content_type.as_deref().unwrap_or("");
        if content_type.starts_with("text/event-stream") {
            return Body::Events(events(&observed.body));
        }
        match serde_json::from_slice::<Value>(&observed.body) {
            Ok(value) if !observed.body.is_empty() => Body::Json(value),
            _ => Body::Text(String::from_utf8_lossy(&observed.body).into_owned()),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Body::Json(_) => "a JSON body",
            Body::Events(_) => "an event stream",
            Body::Text(_) => "a text body",
        }
    }
}

/// The `data:` payloads of an event stream, in order; a payload that is not JSON is kept as a string.
pub fn events(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .map(|data| serde_json::from_str(&data).unwrap_or(Value::String(data)))
        .collect()
}

fn compare_events(target: &[Value], mock: &[Value], clock: bool, out: &mut Vec<Difference>) {
    // Per item (a batch's or `n`'s items stream interleaved, in the scheduler's order): each run of events of
    // one shape, represented by its first event; the closing `[DONE]` (no `index`) ends the first item's.
    let runs = |events: &[Value]| {
        let mut items: Vec<(u64, Vec<(String, Value)>)> = Vec::new();
        for event in events {
            let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
            let position = match items.iter().position(|(i, _)| *i == index) {
                Some(position) => position,
                None => {
                    items.push((index, Vec::new()));
                    items.len() - 1
                }
            };
            let runs = &mut items[position].1;
            let shape = signature(event, None);
            if runs.last().is_none_or(|(last, _)| *last != shape) {
                runs.push((shape, event.clone()));
            }
        }
        items.sort_by_key(|(i, _)| *i);
        items
    };
    let (a, b) = (runs(target), runs(mock));
    let names = |runs: &[(String, Value)]| -> String {
        short(
            &runs
                .iter()
                .map(|(_, e)| event_name(e))
                .collect::<Vec<_>>()
                .join(" "),
        )
    };
    for ((_, ra), (_, rb)) in a.iter().zip(&b) {
        if ra.len() != rb.len() {
            let d = Difference {
                kind: "frames",
                at: "events".to_owned(),
                target: format!("{} run(s): {}", ra.len(), names(ra)),
                mock: format!("{} run(s): {}", rb.len(), names(rb)),
            };
            if !out.contains(&d) {
                out.push(d);
            }
            continue;
        }
        // The same framing, run for run: where two runs' shapes differ, how.
        for ((sa, ea), (sb, eb)) in ra.iter().zip(rb) {
            if sa != sb {
                let mut inner = Vec::new();
                shape("event", None, ea, eb, Mode::EVENT, &mut inner);
                if inner.is_empty() {
                    inner.push(Difference {
                        kind: "frames",
                        at: "events".to_owned(),
                        target: short(sa),
                        mock: short(sb),
                    });
                }
                for d in inner {
                    if !out.contains(&d) {
                        out.push(d);
                    }
                }
            }
        }
    }
    // Each item's last event with a body, compared in full but for its lengths (a delta stream's last event
    // carries the tokens of its chunk); its counts are the answer's.
    let (a, b) = (last_events(target), last_events(mock));
    let indices = |events: &[(u64, &Value)]| events.iter().map(|(i, _)| *i).collect::<Vec<_>>();
    if indices(&a) != indices(&b) {
        out.push(Difference {
            kind: "frames",
            at: "events".to_owned(),
            target: format!("items {:?}", indices(&a)),
            mock: format!("items {:?}", indices(&b)),
        });
    }
    let last_mode = Mode {
        lengths: false,
        counts: !clock,
    };
    for ((_, a), (_, b)) in a.iter().zip(&b) {
        if a.get("error").is_some() || b.get("error").is_some() {
            if a != b {
                out.push(Difference {
                    kind: "error",
                    at: "last event".to_owned(),
                    target: short(&a.to_string()),
                    mock: short(&b.to_string()),
                });
            }
        } else {
            shape("last event", None, a, b, last_mode, out);
        }
    }
}

/// `text` with every path that ends in SGLang's package (`.../sglang/srt/...`) cut to start there: FastAPI's
/// validation errors name the handler's source file, which lives wherever the release was installed.
fn without_install_dir(text: &str) -> String {
    const PACKAGE: &str = "/sglang/srt/";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PACKAGE) {
        // The path starts after the quote (escaped in JSON) that opens it.
        let start = rest[..at].rfind('"').map_or(0, |q| q + 1);
        out.push_str(&rest[..start]);
        out.push_str("...");
        out.push_str(PACKAGE);
        rest = &rest[at + PACKAGE.len()..];
    }
    out.push_str(rest);
    out
}

/// The last event of each item (by its `index`, 0 where events have none), in index order; an error event
/// ends every item.
fn last_events(events: &[Value]) -> Vec<(u64, &Value)> {
    let mut last: Vec<(u64, &Value)> = Vec::new();
    for event in events.iter().filter(|e| !e.is_string()) {
        if event.get("error").is_some() {
            return vec![(0, event)];
        }
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match last.iter_mut().find(|(i, _)| *i == index) {
            Some(entry) => entry.1 = event,
            None => last.push((index, event)),
        }
    }
    last.sort_by_key(|(i, _)| *i);
    last
}

/// An invariant of an answer and whether it holds: `(what, holds)`.
type Invariant = (String, bool);

/// Where an invariant holds on one side and not on the other (whatever the release's semantics, the mock
/// must keep the same ones).
fn compare_invariants(target: &[Invariant], mock: &[Invariant], out: &mut Vec<Difference>) {
    let holds =
        |list: &[Invariant], name: &str| list.iter().find(|(n, _)| n == name).map(|(_, h)| *h);
    let mut names: Vec<&String> = target.iter().chain(mock).map(|(n, _)| n).collect();
    names.dedup();
    for name in names {
        let (a, b) = (holds(target, name), holds(mock, name));
        if a != b {
            let show = |h: Option<bool>| match h {
                Some(true) => "holds",
                Some(false) => "does not hold",
                None => "does not apply",
            };
            let d = Difference {
                kind: "invariant",
                at: name.clone(),
                target: show(a).to_owned(),
                mock: show(b).to_owned(),
            };
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
}

fn count(value: Option<&Value>) -> Option<usize> {
    value
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
}

fn len(value: Option<&Value>) -> Option<usize> {
    value.and_then(Value::as_array).map(Vec::len)
}

/// The invariants of one generated item (`/generate`'s object): its lengths against its token count.
fn item_invariants(item: &Value, out: &mut Vec<Invariant>) {
    let meta = item.get("meta_info");
    let Some(completion) = count(meta.and_then(|m| m.get("completion_tokens"))) else {
        return;
    };
    if let Some(n) = len(item.get("output_ids")) {
        push_invariant(out, "len(output_ids) == completion_tokens", n == completion);
    }
    if let Some(n) = len(meta.and_then(|m| m.get("output_token_logprobs"))) {
        push_invariant(
            out,
            "len(output_token_logprobs) == completion_tokens",
            n == completion,
        );
    }
    if let Some(spans) = meta
        .and_then(|m| m.get("weight_versions"))
        .and_then(Value::as_array)
    {
        let end = spans.last().and_then(|s| count(s.get("end")));
        push_invariant(
            out,
            "weight_versions end at completion_tokens",
            end == Some(completion),
        );
    }
    let finish = meta.and_then(|m| m.get("finish_reason"));
    if finish.and_then(|f| f.get("type")).and_then(Value::as_str) == Some("length") {
        let length = count(finish.and_then(|f| f.get("length")));
        push_invariant(
            out,
            "finish_reason.length == completion_tokens",
            length == Some(completion),
        );
    }
}

fn push_invariant(out: &mut Vec<Invariant>, name: &str, holds: bool) {
    // Over a batch, an invariant holds when it holds for every item.
    match out.iter_mut().find(|(n, _)| n == name) {
        Some((_, all)) => *all &= holds,
        None => out.push((name.to_owned(), holds)),
    }
}

fn usage_invariants(usage: Option<&Value>, out: &mut Vec<Invariant>) {
    let Some(usage) = usage.filter(|u| u.is_object()) else {
        return;
    };
    if let (Some(p), Some(c), Some(t)) = (
        count(usage.get("prompt_tokens")),
        count(usage.get("completion_tokens")),
        count(usage.get("total_tokens")),
    ) {
        push_invariant(
            out,
            "total_tokens == prompt_tokens + completion_tokens",
            p + c == t,
        );
    }
}

/// The invariants of a JSON answer: each item's, and an OpenAI usage's sum.
#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "a body that is not a batch is one item, whatever its JSON type"
)]
fn json_invariants(body: &Value) -> Vec<Invariant> {
    let mut out = Vec::new();
    match body {
        Value::Array(items) => items
            .iter()
            .for_each(|item| item_invariants(item, &mut out)),
        item => item_invariants(item, &mut out),
    }
    usage_invariants(body.get("usage"), &mut out);
    out
}

/// The invariants of a stream: per item (its `index`), whether its events' `output_ids` add up to its last
/// `completion_tokens` (incremental) or its last event carries them all (cumulative), and its last event's
/// own invariants.
fn event_invariants(events: &[Value]) -> Vec<Invariant> {
    let mut out = Vec::new();
    let mut items: Vec<(u64, usize, Option<&Value>)> = Vec::new();
    for event in events.iter().filter(|e| e.get("meta_info").is_some()) {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        let ids = len(event.get("output_ids")).unwrap_or(0);
        match items.iter_mut().find(|(i, _, _)| *i == index) {
            Some(item) => {
                item.1 += ids;
                item.2 = Some(event);
            }
            None => items.push((index, ids, Some(event))),
        }
    }
    for (_, sum, last) in items {
        let Some(last) = last else { continue };
        let completion = count(
            last.get("meta_info")
                .and_then(|m| m.get("completion_tokens")),
        );
        push_invariant(
            &mut out,
            "the events' output_ids add up to completion_tokens",
            Some(sum) == completion,
        );
        let mut own = Vec::new();
        item_invariants(last, &mut own);
        for (name, holds) in own {
            push_invariant(&mut out, &format!("last event: {name}"), holds);
        }
    }
    if let Some(usage) = events
        .iter()
        .rev()
        .find_map(|e| e.get("usage").filter(|u| u.is_object()))
    {
        usage_invariants(Some(usage), &mut out);
    }
    out
}

/// A short name for an event in a framing difference: `[DONE]`, `error`, or its top-level keys.
#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "any other event is named by its type"
)]
fn event_name(event: &Value) -> String {
    match event {
        Value::Object(map) if map.contains_key("error") => "error".to_owned(),
        Value::Object(map) => format!("{{{}}}", map.keys().cloned().collect::<Vec<_>>().join(",")),
        Value::String(s) => s.clone(),
        other => type_name(other).to_owned(),
    }
}

/// A value's shape as one line: object keys in order with their shapes, an array as the shapes of its
/// elements (each distinct shape once), a scalar as its type; a completion's top dict (keyed by token text)
/// as its size. `key` is the object key the value sits under.
#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "a scalar's shape is its type name"
)]
pub fn signature(value: &Value, key: Option<&str>) -> String {
    match value {
        Value::Object(map) if key == Some("top_logprobs") && is_token_dict(map) => {
            format!("{{{} tokens}}", map.len())
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}:{}", signature(v, Some(k))))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => {
            let mut shapes: Vec<String> = Vec::new();
            for item in items {
                let s = signature(item, key);
                if !shapes.contains(&s) {
                    shapes.push(s);
                }
            }
            format!("[{}]", shapes.join("|"))
        }
        Value::String(s) if s == "[DONE]" => "[DONE]".to_owned(),
        other => type_name(other).to_owned(),
    }
}

/// A completion's top-logprobs entry is a dict from token text to logprob; a chat's is an object with the
/// keys `token`, `logprob`, `bytes`.
fn is_token_dict(map: &serde_json::Map<String, Value>) -> bool {
    !map.contains_key("token") && map.values().all(Value::is_number)
}

/// A value's JSON type, an integer told from a float as the document wrote it (`1` is `int`, `1.0` `float`).
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn at_key(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Compares the shapes of `a` (the target's) and `b` (the mock's) at `path`; `key` is the object key the
/// values sit under, which decides whether their values are compared.
fn shape(
    path: &str,
    key: Option<&str>,
    a: &Value,
    b: &Value,
    mode: Mode,
    out: &mut Vec<Difference>,
) {
    let push = |out: &mut Vec<Difference>, kind, target: String, mock: String| {
        out.push(Difference {
            kind,
            at: path.to_owned(),
            target,
            mock,
        });
    };
    if type_name(a) != type_name(b) {
        push(out, "type", describe(a), describe(b));
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            // A completion's top list is a dict keyed by token text: only its size is the protocol's.
            if key == Some("top_logprobs") && is_token_dict(x) && is_token_dict(y) {
                if x.len() != y.len() {
                    push(out, "length", x.len().to_string(), y.len().to_string());
                }
                return;
            }
            let ka: Vec<&String> = x.keys().collect();
            let kb: Vec<&String> = y.keys().collect();
            if ka != kb {
                push(out, "keys", keys_difference(&ka, &kb), describe_keys(&kb));
            }
            for (k, v) in x {
                if let Some(w) = y.get(k) {
                    shape(&at_key(path, k), Some(k), v, w, mode, out);
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            // A token's UTF-8 bytes are as many as its text has; how many tokens ran before an abort or a
            // pause is the clock's.
            let decided =
                key != Some("bytes") && (mode.lengths || key.is_none_or(|k| k == "choices"));
            if x.len() != y.len() && decided {
                push(out, "length", x.len().to_string(), y.len().to_string());
            }
            let inner = format!("{path}[]");
            for (v, w) in x.iter().zip(y) {
                shape(&inner, key, v, w, mode, out);
            }
        }
        (Value::Number(_), Value::Number(_))
            if a != b
                && key.is_some_and(|k| {
                    COUNTED.contains(&k) && (mode.counts || !TIMED.contains(&k))
                }) =>
        {
            push(out, "value", a.to_string(), b.to_string());
        }
        (Value::String(_), Value::String(_))
            if a != b && key.is_some_and(|k| NAMED.contains(&k)) =>
        {
            push(out, "value", a.to_string(), b.to_string());
        }
        _ => {}
    }
}

#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "a scalar is described by its type and value"
)]
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Object(_) | Value::Array(_) => {
            format!("{} {}", type_name(value), short(&signature(value, None)))
        }
        other => format!("{} {}", type_name(other), short(&other.to_string())),
    }
}

fn describe_keys(keys: &[&String]) -> String {
    short(
        &keys
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// How the target's keys differ from the mock's, in words: the keys only one side has, or the order.
fn keys_difference(target: &[&String], mock: &[&String]) -> String {
    let only = |a: &[&String], b: &[&String]| -> Vec<String> {
        a.iter()
            .filter(|k| !b.contains(k))
            .map(|k| k.to_string())
            .collect()
    };
    let target_only = only(target, mock);
    let mock_only = only(mock, target);
    let mut parts = Vec::new();
    if !target_only.is_empty() {
        parts.push(format!("only the target has {}", list(&target_only)));
    }
    if !mock_only.is_empty() {
        parts.push(format!("only the mock has {}", list(&mock_only)));
    }
    if parts.is_empty() {
        parts.push(format!("order {}", describe_keys(target)));
    }
    parts.join("; ")
}

fn list(keys: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut text = keys
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if keys.len() > SHOWN {
        text.push_str(&format!(" and {} more", keys.len() - SHOWN));
    }
    text
}

fn short(text: &str) -> String {
    const MAX: usize = 300;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        format!("{}...", text.chars().take(MAX).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_answer(status: u16, body: Value) -> Observed {
        Observed {
            status: Some(status),
            content_type: Some("application/json".into()),
            body: body.to_string().into_bytes(),
            failure: None,
        }
    }

    fn kinds(differences: &[Difference]) -> Vec<(&str, &str)> {
        differences
            .iter()
            .map(|d| (d.kind, d.at.as_str()))
            .collect()
    }

    #[test]
    fn values_the_model_decides_are_ignored_and_the_protocol_s_are_not() {
        let a = json_answer(
            200,
            json!({"text": "Paris", "output_ids": [1, 2], "meta_info": {"id": "a", "completion_tokens": 2, "finish_reason": {"type": "length", "length": 2}, "e2e_latency": 0.5}}),
        );
        let b = json_answer(
            200,
            json!({"text": "Lyon!", "output_ids": [7, 9], "meta_info": {"id": "b", "completion_tokens": 2, "finish_reason": {"type": "length", "length": 2}, "e2e_latency": 0.1}}),
        );
        assert_eq!(compare(&a, &b, false), []);
        let c = json_answer(
            200,
            json!({"text": "Lyon", "output_ids": [7], "meta_info": {"id": "b", "completion_tokens": 1, "finish_reason": {"type": "stop", "length": 2}, "e2e_latency": 1}}),
        );
        assert_eq!(
            kinds(&compare(&a, &c, false)),
            [
                ("length", "output_ids"),
                ("value", "meta_info.completion_tokens"),
                ("value", "meta_info.finish_reason.type"),
                ("type", "meta_info.e2e_latency"),
                // The target's `finish_reason.length` is its `completion_tokens`; the mock's stopped.
                ("invariant", "finish_reason.length == completion_tokens"),
            ]
        );
    }

    #[test]
    fn keys_their_order_and_null_against_absent_are_compared() {
        let a = json_answer(200, json!({"x": 1, "y": null, "z": {"p": 1, "q": 2}}));
        let b = json_answer(200, json!({"x": 1, "z": {"q": 2, "p": 1}}));
        let d = compare(&a, &b, false);
        assert_eq!(kinds(&d), [("keys", ""), ("keys", "z")]);
        assert_eq!(d[0].target, "only the target has y");
        assert_eq!(d[1].target, "order p,q");
        let c = json_answer(200, json!({"x": 1, "y": {}, "z": {"p": 1, "q": 2}}));
        assert_eq!(kinds(&compare(&a, &c, false)), [("type", "y")]);
    }

    #[test]
    fn errors_are_compared_whole_and_statuses_first() {
        // A validation error's frame names the install directory, which is the machine's.
        let frame = |dir: &str| {
            json_answer(
                400,
                json!({"message": format!("1 validation error:\n  e\n\n  File \"{dir}/sglang/srt/entrypoints/http_server.py\", line 5, in f\n    POST /generate [e]")}),
            )
        };
        let (home, image) = (
            frame("/home/u/venv/lib/python3.11/site-packages"),
            frame("/sgl-workspace/sglang/python"),
        );
        assert!(compare(&home, &image, false).is_empty());
        let elsewhere = json_answer(
            400,
            json!({"message": "1 validation error:\n  e\n\n  File \"/x/sglang/srt/entrypoints/http_server.py\", line 6, in f\n    POST /generate [e]"}),
        );
        assert_eq!(kinds(&compare(&home, &elsewhere, false)), [("error", "")]);
        let a = json_answer(400, json!({"error": {"message": "bad", "code": 400}}));
        let b = json_answer(400, json!({"error": {"message": "Bad", "code": 400}}));
        assert_eq!(kinds(&compare(&a, &b, false)), [("error", "")]);
        let c = json_answer(500, json!({}));
        assert_eq!(compare(&a, &c, false)[0].kind, "status");
        let gone = Observed {
            status: None,
            content_type: None,
            body: vec![],
            failure: Some("timed out".into()),
        };
        assert_eq!(compare(&a, &gone, false)[0].mock, "no answer (timed out)");
    }

    #[test]
    fn a_stream_s_framing_is_its_event_shapes_with_repeats_folded() {
        let sse = |events: &[&str]| Observed {
            status: Some(200),
            content_type: Some("text/event-stream; charset=utf-8".into()),
            body: events
                .iter()
                .map(|e| format!("data: {e}\n\n"))
                .collect::<String>()
                .into_bytes(),
            failure: None,
        };
        let three = sse(&[
            r#"{"t":"a","n":1}"#,
            r#"{"t":"ab","n":2}"#,
            r#"{"t":"abc","n":3}"#,
            "[DONE]",
        ]);
        let two = sse(&[r#"{"t":"ab","n":2}"#, r#"{"t":"abc","n":3}"#, "[DONE]"]);
        assert_eq!(compare(&three, &two, false), []);
        let no_done = sse(&[r#"{"t":"ab","n":2}"#, r#"{"t":"abc","n":3}"#]);
        assert_eq!(
            kinds(&compare(&three, &no_done, false)),
            [("frames", "events")]
        );
        let last_differs = sse(&[r#"{"t":"ab","n":2}"#, r#"{"t":"abc","n":3.0}"#, "[DONE]"]);
        let d = compare(&three, &last_differs, false);
        assert_eq!(kinds(&d), [("frames", "events"), ("type", "last event.n")]);
        // A batch's items interleave in the scheduler's order: framing is per item.
        let batch_a = sse(&[
            r#"{"t":"a","index":0}"#,
            r#"{"t":"b","index":1}"#,
            r#"{"t":"ab","index":1}"#,
            "[DONE]",
        ]);
        let batch_b = sse(&[
            r#"{"t":"b","index":1}"#,
            r#"{"t":"a","index":0}"#,
            r#"{"t":"ab","index":1}"#,
            "[DONE]",
        ]);
        assert_eq!(compare(&batch_a, &batch_b, false), []);
    }

    #[test]
    fn a_completion_s_top_dict_is_compared_by_size() {
        let a = json_answer(
            200,
            json!({"choices": [{"logprobs": {"top_logprobs": [{"Paris": -0.1, " a": -2.0}]}}]}),
        );
        let b = json_answer(
            200,
            json!({"choices": [{"logprobs": {"top_logprobs": [{"x": -0.5, "y": -1.0}]}}]}),
        );
        assert_eq!(compare(&a, &b, false), []);
        let c = json_answer(
            200,
            json!({"choices": [{"logprobs": {"top_logprobs": [{"x": -0.5}]}}]}),
        );
        assert_eq!(
            kinds(&compare(&a, &c, false)),
            [("length", "choices[].logprobs.top_logprobs[]")]
        );
    }
}
