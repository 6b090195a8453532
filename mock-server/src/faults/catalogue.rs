//! The catalogue of fault kinds, their `kind;param=value` syntax and the rules of a fault configuration.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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
pub(super) const GENERATING_ENDPOINTS: &str = "/generate, /v1/completions and /v1/chat/completions";

pub(super) fn generates(endpoint: &str) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
