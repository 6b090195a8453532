//! Fault injection: the catalogue of fault kinds, their `kind;param=value` syntax, the deterministic
//! schedule that picks which request gets which fault, the counters `/admin/stats` reports, and the byte-level
//! mutations of normal response bodies.
//!
//! Body faults never slow the normal encoder: the response is encoded as usual, then the few bytes a fault
//! changes are spliced (which is also how bare `NaN` and `Infinity` literals get into a body).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::model::{mix, unit};

pub mod stream;

/// The request header that forces one fault on one request.
pub const FAULT_HEADER: &str = "x-mock-fault";

macro_rules! fault_kinds {
    ($($variant:ident => $name:literal [$($param:literal),*] $doc:literal,)*) => {
        /// Every injectable fault.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum FaultKind { $(#[doc = $doc] $variant,)* }

        impl FaultKind {
            /// Every kind, in catalogue order.
            pub const ALL: &'static [FaultKind] = &[$(FaultKind::$variant,)*];

            /// The kind's name in headers, flags and config files.
            pub fn name(self) -> &'static str {
                match self { $(FaultKind::$variant => $name,)* }
            }

            /// The parameters the kind accepts.
            pub fn params(self) -> &'static [&'static str] {
                match self { $(FaultKind::$variant => &[$($param),*],)* }
            }

            pub fn from_name(name: &str) -> Option<FaultKind> {
                match name { $($name => Some(FaultKind::$variant),)* _ => None }
            }

            /// One line describing the kind.
            pub fn description(self) -> &'static str {
                match self { $(FaultKind::$variant => $doc,)* }
            }
        }
    };
}

fault_kinds! {
    Status => "status" ["code", "retry_after", "message"]
        "HTTP error with SGLang's body for the status (400, 429 with Retry-After, 500, 503, ...).",
    Delay => "delay" ["ms"] "Wait `ms` before the first byte, then answer normally.",
    Hang => "hang" ["ms"] "Never answer; close the connection after `ms` (default 10 minutes) or when the server shuts down.",
    Reset => "reset" [] "Reset the TCP connection before any byte is sent.",
    MissingMetaInfo => "missing-meta-info" [] "Objects without `meta_info`.",
    MissingLogprobs => "missing-logprobs" [] "`meta_info` without `output_token_logprobs`.",
    ShortLogprobs => "short-logprobs" ["by"] "`output_token_logprobs` shorter than `output_ids` by `by` (1).",
    LongLogprobs => "long-logprobs" ["by"] "`output_token_logprobs` longer than `output_ids` by `by` (1).",
    NullLogprob => "null-logprob" ["at"] "The logprob of output position `at` (0) is `null`.",
    NanLogprob => "nan-logprob" ["at", "value"]
        "The logprob at `at` is a bare `NaN` (or `value=Infinity`/`-Infinity`), as Python's json writes it.",
    PositiveLogprob => "positive-logprob" ["at", "value"] "The logprob at `at` is positive (`value`, 0.5).",
    WrongTokenId => "wrong-token-id" ["at"] "The token id of the logprob entry at `at` differs from `output_ids`.",
    StringLogprob => "string-logprob" ["at"] "The logprob at `at` is a JSON string.",
    TruncatedBody => "truncated-body" ["keep"]
        "The body stops mid-JSON after `keep` bytes (default half); streams: the first chunk is cut.",
    TruncateStream => "truncate-stream" ["after"] "The stream ends cleanly after `after` (1) chunks, without `[DONE]`.",
    CutStream => "cut-stream" ["after"] "The connection breaks after `after` (1) chunks.",
    MalformedChunk => "malformed-chunk" ["at"] "Chunk `at` (0) carries broken JSON.",
    DuplicateChunk => "duplicate-chunk" ["at"] "Chunk `at` (0) is sent twice.",
    ErrorEvent => "error-event" ["after", "message"]
        "After `after` (1) chunks an `{\"error\":...}` event and `[DONE]` end the stream.",
    Stall => "stall" ["ms"]
        "Pause `ms` before every streamed chunk, or before the body of a non-streamed answer.",
    AbortWaiting => "abort-waiting" [] "Aborted in the waiting queue: \"Abort in waiting queue\", no `prompt_tokens`.",
    AbortRunning => "abort-running" ["after"] "Aborted while running after `after` (1) tokens, partial output kept.",
    AbortBeforePrefill => "abort-before-prefill" []
        "The old (MID) \"Abort before prefill\" shape: no `output_ids`, no logprobs.",
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FaultKind {
    /// Faults that apply to any endpoint (the others only to `/generate`).
    pub fn is_http_level(self) -> bool {
        matches!(
            self,
            FaultKind::Status | FaultKind::Delay | FaultKind::Hang | FaultKind::Reset
        )
    }
}

/// The endpoints that generate, where body, stream and abort faults apply (HTTP-level faults apply anywhere).
const GENERATING_ENDPOINTS: &str = "/generate, /v1/completions and /v1/chat/completions";

fn generates(endpoint: &str) -> bool {
    matches!(
        endpoint,
        "/generate" | "/v1/completions" | "/v1/chat/completions"
    )
}

/// Why a fault spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultError {
    #[error("unknown fault kind {0:?}; known kinds: {known}", known = known_kinds())]
    UnknownKind(String),
    #[error("fault {kind} takes no parameter {param:?}; it accepts {accepted:?}")]
    UnknownParam {
        kind: FaultKind,
        param: String,
        accepted: &'static [&'static str],
    },
    #[error("fault parameter {param}={value:?} is not valid: {reason}")]
    BadValue {
        param: String,
        value: String,
        reason: &'static str,
    },
    #[error("fault rule {index}: {reason}")]
    BadRule { index: usize, reason: String },
}

fn known_kinds() -> String {
    FaultKind::ALL
        .iter()
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One fault with its parameters, written `kind;param=value;...` (the header and config syntax).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    params: BTreeMap<String, String>,
}

impl Fault {
    pub fn new(kind: FaultKind) -> Fault {
        Fault {
            kind,
            params: BTreeMap::new(),
        }
    }

    /// A parameter as a non-negative integer, `default` when absent. Values were checked when parsed.
    pub fn u64(&self, name: &str, default: u64) -> u64 {
        self.params
            .get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    pub fn str(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }
}

impl FromStr for Fault {
    type Err = FaultError;

    fn from_str(spec: &str) -> Result<Fault, FaultError> {
        let mut parts = spec.split(';').map(str::trim);
        let name = parts.next().unwrap_or("");
        let kind =
            FaultKind::from_name(name).ok_or_else(|| FaultError::UnknownKind(name.into()))?;
        let mut params = BTreeMap::new();
        for part in parts.filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let (key, value) = (key.trim(), value.trim());
            if !kind.params().contains(&key) {
                return Err(FaultError::UnknownParam {
                    kind,
                    param: key.to_owned(),
                    accepted: kind.params(),
                });
            }
            let numeric = matches!(key, "ms" | "after" | "at" | "by" | "keep" | "retry_after");
            if numeric && value.parse::<u64>().is_err() {
                return Err(FaultError::BadValue {
                    param: key.to_owned(),
                    value: value.to_owned(),
                    reason: "expected a non-negative integer",
                });
            }
            if key == "code" && !matches!(value.parse::<u16>(), Ok(400..=599)) {
                return Err(FaultError::BadValue {
                    param: key.to_owned(),
                    value: value.to_owned(),
                    reason: "expected an HTTP error status from 400 to 599",
                });
            }
            if key == "value" {
                let ok = match kind {
                    FaultKind::NanLogprob => matches!(value, "NaN" | "Infinity" | "-Infinity"),
                    _ => value.parse::<f64>().is_ok_and(|v| v.is_finite()),
                };
                if !ok {
                    return Err(FaultError::BadValue {
                        param: key.to_owned(),
                        value: value.to_owned(),
                        reason: "expected NaN, Infinity or -Infinity for nan-logprob, a finite number otherwise",
                    });
                }
            }
            params.insert(key.to_owned(), value.to_owned());
        }
        Ok(Fault { kind, params })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        for (k, v) in &self.params {
            write!(f, ";{k}={v}")?;
        }
        Ok(())
    }
}

impl Serialize for Fault {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Fault {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Fault, D::Error> {
        let spec = String::deserialize(deserializer)?;
        spec.parse().map_err(serde::de::Error::custom)
    }
}

/// Which requests a rule considers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamFilter {
    Stream,
    NonStream,
}

/// One scheduling rule. A request the filters let through gets the rule's index `n` (0, 1, 2, ... in arrival
/// order among the requests that rule considered), and the fault fires when every condition given holds:
/// `n < first`, `(n + 1) % every == 0`, and a seeded draw for `n` below `rate`. The draw depends only on the
/// seed, the rule's position and `n`, never on timing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    /// The fault, as `kind;param=value...`.
    pub fault: Fault,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    /// Only between these offsets (milliseconds since the configuration was installed), end exclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<(u64, u64)>,
    /// Only this path (default: `/generate`; HTTP-level faults may name any endpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Only streamed (`"stream"`) or non-streamed (`"nonstream"`) requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamFilter>,
}

impl FaultRule {
    pub fn new(fault: Fault) -> FaultRule {
        FaultRule {
            fault,
            rate: None,
            first: None,
            every: None,
            window_ms: None,
            endpoint: None,
            stream: None,
        }
    }
}

/// The server-wide fault schedule: a seed and rules, the first rule that fires wins.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub rules: Vec<FaultRule>,
}

impl FaultConfig {
    /// Check every rule's numbers and endpoint.
    pub fn validate(&self) -> Result<(), FaultError> {
        for (index, rule) in self.rules.iter().enumerate() {
            let bad = |reason: String| Err(FaultError::BadRule { index, reason });
            if let Some(rate) = rule.rate
                && !(0.0..=1.0).contains(&rate)
            {
                return bad(format!("rate {rate} is not within [0, 1]"));
            }
            if rule.every == Some(0) {
                return bad("every must be at least 1".to_owned());
            }
            if let Some((start, end)) = rule.window_ms
                && start >= end
            {
                return bad(format!("window_ms [{start}, {end}] is empty"));
            }
            let endpoint = rule.endpoint.as_deref().unwrap_or("/generate");
            if !endpoint.starts_with('/') {
                return bad(format!("endpoint {endpoint:?} does not start with /"));
            }
            if !generates(endpoint) && !rule.fault.kind.is_http_level() {
                return bad(format!(
                    "{} only applies to {GENERATING_ENDPOINTS}, not {endpoint}",
                    rule.fault.kind
                ));
            }
        }
        Ok(())
    }

    /// Parse and validate a JSON configuration.
    pub fn from_json(bytes: &[u8]) -> Result<FaultConfig, FaultConfigError> {
        let config: FaultConfig = serde_json::from_slice(bytes)?;
        config.validate()?;
        Ok(config)
    }
}

/// Why a fault configuration file or body was refused.
#[derive(Debug, thiserror::Error)]
pub enum FaultConfigError {
    #[error("the fault configuration is not valid JSON of the expected shape")]
    Json(#[from] serde_json::Error),
    #[error("the fault configuration is not valid")]
    Invalid(#[from] FaultError),
}

struct Installed {
    config: FaultConfig,
    counters: Vec<AtomicU64>,
    since: Instant,
}

/// The live schedule plus the counters of `/admin/stats`. Replacing the configuration is atomic: a request
/// sees either the old rules or the new ones.
pub struct Faults {
    installed: RwLock<Arc<Installed>>,
    requests: Mutex<BTreeMap<String, u64>>,
    injected: Mutex<BTreeMap<FaultKind, u64>>,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("config", &self.config())
            .finish()
    }
}

impl Faults {
    pub fn new(config: FaultConfig) -> Faults {
        Faults {
            installed: RwLock::new(Arc::new(Installed::new(config))),
            requests: Mutex::new(BTreeMap::new()),
            injected: Mutex::new(BTreeMap::new()),
        }
    }

    fn current(&self) -> Arc<Installed> {
        match self.installed.read() {
            Ok(guard) => Arc::clone(&guard),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    pub fn config(&self) -> FaultConfig {
        self.current().config.clone()
    }

    /// Replace the configuration; rule counters and the time window start afresh.
    pub fn replace(&self, config: FaultConfig) {
        let installed = Arc::new(Installed::new(config));
        match self.installed.write() {
            Ok(mut guard) => *guard = installed,
            Err(poisoned) => *poisoned.into_inner() = installed,
        }
    }

    /// Count a request to `endpoint` and pick its fault: the header's if given (a bad header is an error),
    /// otherwise the first scheduled rule that fires.
    pub fn decide(
        &self,
        endpoint: &str,
        stream: bool,
        header: Option<&str>,
    ) -> Result<Option<Fault>, FaultError> {
        {
            let mut requests = lock(&self.requests);
            match requests.get_mut(endpoint) {
                Some(count) => *count += 1,
                None => {
                    requests.insert(endpoint.to_owned(), 1);
                }
            }
        }
        if let Some(spec) = header {
            let fault: Fault = spec.parse()?;
            if !generates(endpoint) && !fault.kind.is_http_level() {
                return Err(FaultError::BadRule {
                    index: 0,
                    reason: format!(
                        "{} only applies to {GENERATING_ENDPOINTS}, not {endpoint}",
                        fault.kind
                    ),
                });
            }
            return Ok(Some(fault));
        }
        let installed = self.current();
        if installed.config.rules.is_empty() {
            return Ok(None);
        }
        Ok(installed.pick(endpoint, stream))
    }

    /// Record that `kind` was injected.
    pub fn record(&self, kind: FaultKind) {
        *lock(&self.injected).entry(kind).or_default() += 1;
    }

    /// Requests seen per endpoint.
    pub fn requests_seen(&self) -> BTreeMap<String, u64> {
        lock(&self.requests).clone()
    }

    /// Faults injected per kind.
    pub fn injected(&self) -> BTreeMap<FaultKind, u64> {
        lock(&self.injected).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Installed {
    fn new(config: FaultConfig) -> Installed {
        Installed {
            counters: config.rules.iter().map(|_| AtomicU64::new(0)).collect(),
            config,
            since: Instant::now(),
        }
    }

    fn pick(&self, endpoint: &str, stream: bool) -> Option<Fault> {
        let elapsed_ms = self.since.elapsed().as_millis() as u64;
        for (i, rule) in self.config.rules.iter().enumerate() {
            if rule.endpoint.as_deref().unwrap_or("/generate") != endpoint {
                continue;
            }
            match rule.stream {
                Some(StreamFilter::Stream) if !stream => continue,
                Some(StreamFilter::NonStream) if stream => continue,
                _ => {}
            }
            if let Some((start, end)) = rule.window_ms
                && !(start..end).contains(&elapsed_ms)
            {
                continue;
            }
            let n = self.counters[i].fetch_add(1, Ordering::Relaxed);
            let fires = rule.first.is_none_or(|first| n < first)
                && rule.every.is_none_or(|k| (n + 1).is_multiple_of(k.max(1)))
                && rule
                    .rate
                    .is_none_or(|rate| unit(mix(mix(self.config.seed, i as u64), n)) < rate);
            if fires {
                return Some(rule.fault.clone());
            }
        }
        None
    }
}

// ---------------------------------------------------------------------------------------------------------
// Body mutations.
// ---------------------------------------------------------------------------------------------------------

/// Whether a fault changes the JSON of each answered object (non-stream bodies and stream chunks).
pub fn is_body_fault(kind: FaultKind) -> bool {
    matches!(
        kind,
        FaultKind::MissingMetaInfo
            | FaultKind::MissingLogprobs
            | FaultKind::ShortLogprobs
            | FaultKind::LongLogprobs
            | FaultKind::NullLogprob
            | FaultKind::NanLogprob
            | FaultKind::PositiveLogprob
            | FaultKind::WrongTokenId
            | FaultKind::StringLogprob
    )
}

/// Apply a body fault to an encoded body: one object, or an array of objects (a batch).
pub fn mutate_body(fault: &Fault, body: &[u8]) -> Vec<u8> {
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

/// Apply a body fault to one `{"text", "output_ids", "meta_info"}` object.
pub fn mutate_object(fault: &Fault, obj: &[u8]) -> Vec<u8> {
    if fault.kind == FaultKind::MissingMetaInfo {
        return remove_key(obj, 0, "meta_info").unwrap_or_else(|| obj.to_vec());
    }
    let Some(meta) = find_key(obj, 0, "meta_info") else {
        return obj.to_vec();
    };
    let Some(lps) = find_key(obj, meta.value_start, "output_token_logprobs") else {
        return obj.to_vec();
    };
    if fault.kind == FaultKind::MissingLogprobs {
        return remove_key(obj, meta.value_start, "output_token_logprobs")
            .unwrap_or_else(|| obj.to_vec());
    }
    let list = &obj[lps.value_start..lps.value_end];
    let mut triples: Vec<Vec<Vec<u8>>> = split_array(list, 0)
        .into_iter()
        .map(|(s, e)| {
            split_array(&list[s..e], 0)
                .into_iter()
                .map(|(a, b)| list[s..e][a..b].to_vec())
                .collect()
        })
        .collect();
    let at = |n: usize| (fault.u64("at", 0) as usize).min(n.saturating_sub(1));
    match fault.kind {
        FaultKind::ShortLogprobs => {
            let by = fault.u64("by", 1) as usize;
            triples.truncate(triples.len().saturating_sub(by));
        }
        FaultKind::LongLogprobs => {
            let extra = triples
                .last()
                .cloned()
                .unwrap_or_else(|| vec![b"-0.5".to_vec(), b"0".to_vec(), b"null".to_vec()]);
            for _ in 0..fault.u64("by", 1) {
                triples.push(extra.clone());
            }
        }
        kind => {
            if triples.is_empty() {
                return obj.to_vec();
            }
            let i = at(triples.len());
            let triple = &mut triples[i];
            if triple.len() < 3 {
                return obj.to_vec();
            }
            match kind {
                FaultKind::NullLogprob => triple[0] = b"null".to_vec(),
                FaultKind::NanLogprob => {
                    triple[0] = fault.str("value").unwrap_or("NaN").as_bytes().to_vec();
                }
                FaultKind::PositiveLogprob => {
                    triple[0] = fault.str("value").unwrap_or("0.5").as_bytes().to_vec();
                }
                FaultKind::StringLogprob => {
                    let mut quoted = b"\"".to_vec();
                    quoted.extend_from_slice(&triple[0]);
                    quoted.push(b'"');
                    triple[0] = quoted;
                }
                FaultKind::WrongTokenId => {
                    let id: u64 = std::str::from_utf8(&triple[1])
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    triple[1] = (if id == 0 { 1 } else { id - 1 }).to_string().into_bytes();
                }
                _ => return obj.to_vec(),
            }
        }
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
    out
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

    const OBJ: &str = r#"{"text":"ab","output_ids":[5,6],"meta_info":{"id":"r","input_token_logprobs":[],"output_token_logprobs":[[-0.25,5,null],[-1.5,6,"b"]],"completion_tokens":2}}"#;

    fn apply(spec: &str) -> String {
        let fault: Fault = spec.parse().unwrap();
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

    #[test]
    fn specs_parse_strictly() {
        assert!(matches!(
            "nope".parse::<Fault>(),
            Err(FaultError::UnknownKind(_))
        ));
        assert!(matches!(
            "stall;sec=1".parse::<Fault>(),
            Err(FaultError::UnknownParam { .. })
        ));
        assert!(matches!(
            "stall;ms=x".parse::<Fault>(),
            Err(FaultError::BadValue { .. })
        ));
        assert!(matches!(
            "status;code=200".parse::<Fault>(),
            Err(FaultError::BadValue { .. })
        ));
        let fault: Fault = " stall ; ms=25 ".parse().unwrap();
        assert_eq!(fault.to_string(), "stall;ms=25");
        assert_eq!(fault.u64("ms", 0), 25);
    }

    #[test]
    fn schedules_are_deterministic() {
        let config = FaultConfig {
            seed: 3,
            rules: vec![
                FaultRule {
                    first: Some(2),
                    ..FaultRule::new("reset".parse().unwrap())
                },
                FaultRule {
                    every: Some(3),
                    ..FaultRule::new("stall;ms=1".parse().unwrap())
                },
                FaultRule {
                    rate: Some(0.5),
                    ..FaultRule::new("missing-logprobs".parse().unwrap())
                },
            ],
        };
        let run = || {
            let faults = Faults::new(config.clone());
            (0..40)
                .map(|_| {
                    faults
                        .decide("/generate", false, None)
                        .unwrap()
                        .map(|f| f.kind)
                })
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        assert_eq!(a[..2], [Some(FaultKind::Reset), Some(FaultKind::Reset)]);
        // Rule 1 counts the requests rule 0 let through: its 3rd, 6th, ... are requests 4, 7, ...
        assert_eq!(a[4], Some(FaultKind::Stall));
        let rated = a
            .iter()
            .filter(|k| **k == Some(FaultKind::MissingLogprobs))
            .count();
        assert!((5..25).contains(&rated), "{rated}");
    }
}
