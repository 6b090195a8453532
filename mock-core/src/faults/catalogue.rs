//! The catalogue of fault kinds: each kind's name, its class (what it acts on), its typed parameters with their
//! defaults, and the `kind;param=value` syntax, parsed here and nowhere else; and the rules of a fault
//! configuration.
//!
//! A [`Fault`] is one of four classes, each its own enum: [`HttpFault`] (acts before the request runs, on any
//! endpoint), [`BodyFault`] (rewrites the JSON of each answered object), [`StreamFault`] (acts on the bytes or
//! events of an answer as it is sent) and [`EngineFault`] (acts inside the engine: aborts). The code that
//! applies a class matches its enum exhaustively, so a kind added here does not compile until every place
//! that must handle it does.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The request header that forces one fault on one request.
pub const FAULT_HEADER: &str = "x-mock-fault";

macro_rules! fault_kinds {
    ($($variant:ident => $name:literal $doc:literal,)*) => {
        /// The name of every injectable fault, for counters, headers and config files; [`Fault`] carries its
        /// class and parameters.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum FaultKind { $(#[doc = $doc] $variant,)* }

        impl FaultKind {
            /// Every kind, in catalogue order.
            pub const ALL: &'static [FaultKind] = &[$(FaultKind::$variant,)*];

            /// The kind's name in headers, flags and config files.
            pub fn name(self) -> &'static str {
                match self { $(FaultKind::$variant => $name,)* }
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
    Status => "status"
        "HTTP error with SGLang's body for the status (400, 429 with Retry-After, 500, 503, ...).",
    Delay => "delay" "Wait `ms` before the first byte, then answer normally.",
    Hang => "hang" "Never answer; close the connection after `ms` (default 10 minutes) or when the server shuts down.",
    Reset => "reset" "Reset the TCP connection before any byte is sent.",
    MissingMetaInfo => "missing-meta-info" "Objects without `meta_info`.",
    MissingLogprobs => "missing-logprobs" "`meta_info` without `output_token_logprobs`.",
    ShortLogprobs => "short-logprobs" "`output_token_logprobs` shorter than `output_ids` by `by` (1).",
    LongLogprobs => "long-logprobs" "`output_token_logprobs` longer than `output_ids` by `by` (1).",
    NullLogprob => "null-logprob" "The logprob of output position `at` (0) is `null`.",
    NanLogprob => "nan-logprob"
        "The logprob at `at` is a bare `NaN` (or `value=Infinity`/`-Infinity`), as Python's json writes it.",
    PositiveLogprob => "positive-logprob" "The logprob at `at` is positive (`value`, 0.5).",
    WrongTokenId => "wrong-token-id" "The token id of the logprob entry at `at` differs from `output_ids`.",
    StringLogprob => "string-logprob" "The logprob at `at` is a JSON string.",
    TruncatedBody => "truncated-body"
        "The body stops mid-JSON after `keep` bytes (default half); streams: the first chunk is cut.",
    TruncateStream => "truncate-stream" "The stream ends cleanly after `after` (1) chunks, without `[DONE]`.",
    CutStream => "cut-stream" "The connection breaks after `after` (1) chunks.",
    MalformedChunk => "malformed-chunk" "Chunk `at` (0) carries broken JSON.",
    DuplicateChunk => "duplicate-chunk" "Chunk `at` (0) is sent twice.",
    ErrorEvent => "error-event"
        "After `after` (1) chunks an `{\"error\":...}` event and `[DONE]` end the stream.",
    Stall => "stall"
        "Pause `ms` before every streamed chunk, or before the body of a non-streamed answer.",
    DropChannel => "drop-channel"
        "`meta_info` without `channel` (`routed_experts`, the default; `weight_versions`; `sampling_mask`; `top_p`).",
    ShortRoutes => "routes-short" "`routed_experts` without its last `by` (1) rows: routes cut shorter than tokens.",
    ExtraRoute => "routes-extra-row" "`routed_experts` with its last row twice: one row too many.",
    RetractRoutes => "retract-routes"
        "Every routed expert id changed (XOR 1), the logprobs kept: a retract that re-captured the routes.",
    SpansGap => "spans-gap" "The last `weight_versions` span starts one token late: a gap.",
    SpansOverlap => "spans-overlap" "The last output token gets a second `weight_versions` span: an overlap.",
    StaleVersion => "stale-version" "The last `weight_versions` span carries a stale version.",
    MaskMissingToken => "mask-missing-token"
        "The sampling support of output position `at` (0) lacks the sampled token.",
    TwoElementLogprobs => "two-element-logprobs"
        "`output_token_logprobs` entries as `[logprob, id]`, as slime's and miles' fake servers write them.",
    PhantomLogprob => "phantom-logprob"
        "An answer without output tokens carries one logprob entry anyway (`max_new_tokens: 0`).",
    AbortWaiting => "abort-waiting" "Aborted in the waiting queue: \"Abort in waiting queue\", no `prompt_tokens`.",
    AbortRunning => "abort-running" "Aborted while running after `after` (1) tokens, partial output kept.",
    AbortBeforePrefill => "abort-before-prefill"
        "The \"Abort before prefill\" shape (0.5.3's waiting-queue abort): no `output_ids`, no logprobs.",
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a fault acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultClass {
    /// The HTTP exchange, before the request runs; any endpoint (`/admin/*` and `/metrics` excepted).
    Http,
    /// The JSON of each answered object (a non-stream body's objects, each stream chunk).
    Body,
    /// The bytes or events of an answer as it is sent.
    Stream,
    /// The request inside the engine: where and how it is aborted.
    Engine,
}

/// One fault with its parameters, written `kind;param=value;...` (the header and config syntax).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Http(HttpFault),
    Body(BodyFault),
    Stream(StreamFault),
    Engine(EngineFault),
}

/// Faults that end or delay the HTTP exchange before the request runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpFault {
    /// HTTP `code` (400 to 599) with SGLang's body for it; `message` replaces the standard text; a 429 carries
    /// `Retry-After: retry_after`.
    Status {
        code: u16,
        retry_after: u64,
        message: Option<String>,
    },
    /// Wait `ms`, then answer normally.
    Delay { ms: u64 },
    /// Never answer; close the connection after `ms` or when the server shuts down.
    Hang { ms: u64 },
    /// Reset the TCP connection before any byte.
    Reset,
}

/// Faults that rewrite the JSON of each answered object; positions past the end mean the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyFault {
    MissingMetaInfo,
    MissingLogprobs,
    ShortLogprobs {
        by: u64,
    },
    LongLogprobs {
        by: u64,
    },
    NullLogprob {
        at: u64,
    },
    NanLogprob {
        at: u64,
        value: NonFinite,
    },
    /// `value` is the literal written in place of the logprob.
    PositiveLogprob {
        at: u64,
        value: NumberLiteral,
    },
    WrongTokenId {
        at: u64,
    },
    StringLogprob {
        at: u64,
    },
    DropChannel {
        channel: Channel,
    },
    ShortRoutes {
        by: u64,
    },
    ExtraRoute,
    RetractRoutes,
    SpansGap,
    SpansOverlap,
    StaleVersion,
    MaskMissingToken {
        at: u64,
    },
    TwoElementLogprobs,
    PhantomLogprob,
}

/// A per-token channel beside the logprobs, as `drop-channel` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// `routed_experts`.
    RoutedExperts,
    /// `weight_versions`.
    WeightVersions,
    /// `output_token_sampling_mask` with its logprobs and length.
    SamplingMask,
    /// `top_p_token_ids` with `top_p_token_offsets` (slime's top-p replay).
    TopP,
}

impl Channel {
    pub fn name(self) -> &'static str {
        match self {
            Channel::RoutedExperts => "routed_experts",
            Channel::WeightVersions => "weight_versions",
            Channel::SamplingMask => "sampling_mask",
            Channel::TopP => "top_p",
        }
    }

    /// The `meta_info` keys the channel is made of.
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            Channel::RoutedExperts => &["routed_experts"],
            Channel::WeightVersions => &["weight_versions"],
            Channel::SamplingMask => &[
                "output_token_sampling_mask",
                "output_token_sampling_logprobs",
                "output_token_sampling_mask_length",
            ],
            Channel::TopP => &["top_p_token_ids", "top_p_token_offsets"],
        }
    }
}

/// Faults on the bytes or events of an answer as it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamFault {
    /// The body stops after `keep` bytes (`None`: half of it); a stream's first chunk is cut.
    TruncatedBody {
        keep: Option<u64>,
    },
    TruncateStream {
        after: u64,
    },
    CutStream {
        after: u64,
    },
    MalformedChunk {
        at: u64,
    },
    DuplicateChunk {
        at: u64,
    },
    /// `message` replaces the standard text of the error event.
    ErrorEvent {
        after: u64,
        message: Option<String>,
    },
    Stall {
        ms: u64,
    },
}

/// Faults inside the engine: a request aborted where SGLang can abort one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineFault {
    AbortWaiting,
    AbortRunning { after: u64 },
    AbortBeforePrefill,
}

/// The non-finite literal `nan-logprob` writes, as Python's `json.dumps` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonFinite {
    NaN,
    Infinity,
    NegInfinity,
}

impl NonFinite {
    pub fn literal(self) -> &'static str {
        match self {
            NonFinite::NaN => "NaN",
            NonFinite::Infinity => "Infinity",
            NonFinite::NegInfinity => "-Infinity",
        }
    }
}

/// A finite JSON number, kept as written (`positive-logprob;value=1e3` writes `1e3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberLiteral(String);

impl NumberLiteral {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The defaults of the parameters a spec leaves out.
mod default {
    pub(super) const STATUS_CODE: u16 = 500;
    pub(super) const RETRY_AFTER_SECS: u64 = 1;
    pub(super) const DELAY_MS: u64 = 0;
    pub(super) const HANG_MS: u64 = 600_000;
    pub(super) const BY: u64 = 1;
    pub(super) const AT: u64 = 0;
    pub(super) const AFTER: u64 = 1;
    pub(super) const STALL_MS: u64 = 0;
    pub(super) const POSITIVE_LOGPROB: &str = "0.5";
}

impl Fault {
    pub fn class(&self) -> FaultClass {
        match self {
            Fault::Http(_) => FaultClass::Http,
            Fault::Body(_) => FaultClass::Body,
            Fault::Stream(_) => FaultClass::Stream,
            Fault::Engine(_) => FaultClass::Engine,
        }
    }

    /// The engine fault, if this is one: what a generating route hands to the step core.
    pub fn engine(&self) -> Option<&EngineFault> {
        match self {
            Fault::Engine(engine) => Some(engine),
            Fault::Http(_) | Fault::Body(_) | Fault::Stream(_) => None,
        }
    }

    /// The body fault, if this is one.
    pub fn body(&self) -> Option<&BodyFault> {
        match self {
            Fault::Body(body) => Some(body),
            Fault::Http(_) | Fault::Stream(_) | Fault::Engine(_) => None,
        }
    }

    /// Whether the fault applies to any endpoint (the others only to the generating ones).
    pub fn is_http_level(&self) -> bool {
        self.class() == FaultClass::Http
    }

    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::Http(f) => match f {
                HttpFault::Status { .. } => FaultKind::Status,
                HttpFault::Delay { .. } => FaultKind::Delay,
                HttpFault::Hang { .. } => FaultKind::Hang,
                HttpFault::Reset => FaultKind::Reset,
            },
            Fault::Body(f) => match f {
                BodyFault::MissingMetaInfo => FaultKind::MissingMetaInfo,
                BodyFault::MissingLogprobs => FaultKind::MissingLogprobs,
                BodyFault::ShortLogprobs { .. } => FaultKind::ShortLogprobs,
                BodyFault::LongLogprobs { .. } => FaultKind::LongLogprobs,
                BodyFault::NullLogprob { .. } => FaultKind::NullLogprob,
                BodyFault::NanLogprob { .. } => FaultKind::NanLogprob,
                BodyFault::PositiveLogprob { .. } => FaultKind::PositiveLogprob,
                BodyFault::WrongTokenId { .. } => FaultKind::WrongTokenId,
                BodyFault::StringLogprob { .. } => FaultKind::StringLogprob,
                BodyFault::DropChannel { .. } => FaultKind::DropChannel,
                BodyFault::ShortRoutes { .. } => FaultKind::ShortRoutes,
                BodyFault::ExtraRoute => FaultKind::ExtraRoute,
                BodyFault::RetractRoutes => FaultKind::RetractRoutes,
                BodyFault::SpansGap => FaultKind::SpansGap,
                BodyFault::SpansOverlap => FaultKind::SpansOverlap,
                BodyFault::StaleVersion => FaultKind::StaleVersion,
                BodyFault::MaskMissingToken { .. } => FaultKind::MaskMissingToken,
                BodyFault::TwoElementLogprobs => FaultKind::TwoElementLogprobs,
                BodyFault::PhantomLogprob => FaultKind::PhantomLogprob,
            },
            Fault::Stream(f) => match f {
                StreamFault::TruncatedBody { .. } => FaultKind::TruncatedBody,
                StreamFault::TruncateStream { .. } => FaultKind::TruncateStream,
                StreamFault::CutStream { .. } => FaultKind::CutStream,
                StreamFault::MalformedChunk { .. } => FaultKind::MalformedChunk,
                StreamFault::DuplicateChunk { .. } => FaultKind::DuplicateChunk,
                StreamFault::ErrorEvent { .. } => FaultKind::ErrorEvent,
                StreamFault::Stall { .. } => FaultKind::Stall,
            },
            Fault::Engine(f) => match f {
                EngineFault::AbortWaiting => FaultKind::AbortWaiting,
                EngineFault::AbortRunning { .. } => FaultKind::AbortRunning,
                EngineFault::AbortBeforePrefill => FaultKind::AbortBeforePrefill,
            },
        }
    }

    /// The parameters in the canonical spec: every one with a value, in catalogue order.
    fn params(&self) -> Vec<(&'static str, String)> {
        let n = |name, v: u64| (name, v.to_string());
        let text = |name, v: &Option<String>| v.as_ref().map(|v| (name, v.clone()));
        match self {
            Fault::Http(f) => match f {
                HttpFault::Status {
                    code,
                    retry_after,
                    message,
                } => [
                    Some(("code", code.to_string())),
                    Some(n("retry_after", *retry_after)),
                ]
                .into_iter()
                .chain([text("message", message)])
                .flatten()
                .collect(),
                HttpFault::Delay { ms } | HttpFault::Hang { ms } => vec![n("ms", *ms)],
                HttpFault::Reset => Vec::new(),
            },
            Fault::Body(f) => match f {
                BodyFault::MissingMetaInfo
                | BodyFault::MissingLogprobs
                | BodyFault::ExtraRoute
                | BodyFault::RetractRoutes
                | BodyFault::SpansGap
                | BodyFault::SpansOverlap
                | BodyFault::StaleVersion
                | BodyFault::TwoElementLogprobs
                | BodyFault::PhantomLogprob => Vec::new(),
                BodyFault::ShortLogprobs { by }
                | BodyFault::LongLogprobs { by }
                | BodyFault::ShortRoutes { by } => {
                    vec![n("by", *by)]
                }
                BodyFault::NullLogprob { at }
                | BodyFault::WrongTokenId { at }
                | BodyFault::StringLogprob { at }
                | BodyFault::MaskMissingToken { at } => vec![n("at", *at)],
                BodyFault::DropChannel { channel } => vec![("channel", channel.name().to_owned())],
                BodyFault::NanLogprob { at, value } => {
                    vec![n("at", *at), ("value", value.literal().to_owned())]
                }
                BodyFault::PositiveLogprob { at, value } => {
                    vec![n("at", *at), ("value", value.as_str().to_owned())]
                }
            },
            Fault::Stream(f) => match f {
                StreamFault::TruncatedBody { keep } => {
                    keep.map(|k| n("keep", k)).into_iter().collect()
                }
                StreamFault::TruncateStream { after } | StreamFault::CutStream { after } => {
                    vec![n("after", *after)]
                }
                StreamFault::MalformedChunk { at } | StreamFault::DuplicateChunk { at } => {
                    vec![n("at", *at)]
                }
                StreamFault::ErrorEvent { after, message } => [Some(n("after", *after))]
                    .into_iter()
                    .chain([text("message", message)])
                    .flatten()
                    .collect(),
                StreamFault::Stall { ms } => vec![n("ms", *ms)],
            },
            Fault::Engine(f) => match f {
                EngineFault::AbortWaiting | EngineFault::AbortBeforePrefill => Vec::new(),
                EngineFault::AbortRunning { after } => vec![n("after", *after)],
            },
        }
    }
}

/// The `param=value` pairs of one spec, read by [`Params::build`] with the kind's typed getters; a pair no
/// getter asked for is an unknown parameter.
#[derive(Debug, Default)]
struct Params<'a> {
    given: Vec<(&'a str, &'a str)>,
    /// The parameters the kind accepts, in the order its getters asked for them.
    asked: Vec<&'static str>,
}

impl<'a> Params<'a> {
    /// The value of `name` (the last one if given twice).
    fn raw(&mut self, name: &'static str) -> Option<&'a str> {
        self.asked.push(name);
        self.given
            .iter()
            .rev()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| *value)
    }

    fn bad(name: &str, value: &str, reason: &'static str) -> FaultError {
        FaultError::BadValue {
            param: name.to_owned(),
            value: value.to_owned(),
            reason,
        }
    }

    /// A non-negative integer.
    fn int(&mut self, name: &'static str) -> Result<Option<u64>, FaultError> {
        self.raw(name)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| Self::bad(name, v, "expected a non-negative integer"))
            })
            .transpose()
    }

    fn text(&mut self, name: &'static str) -> Option<String> {
        self.raw(name).map(str::to_owned)
    }

    fn status(&mut self) -> Result<Option<u16>, FaultError> {
        self.raw("code")
            .map(|v| match v.parse::<u16>() {
                Ok(code @ 400..=599) => Ok(code),
                _ => Err(Self::bad(
                    "code",
                    v,
                    "expected an HTTP error status from 400 to 599",
                )),
            })
            .transpose()
    }

    const VALUE_REASON: &'static str =
        "expected NaN, Infinity or -Infinity for nan-logprob, a finite number otherwise";

    fn channel(&mut self) -> Result<Option<Channel>, FaultError> {
        self.raw("channel")
            .map(|v| match v {
                "routed_experts" => Ok(Channel::RoutedExperts),
                "weight_versions" => Ok(Channel::WeightVersions),
                "sampling_mask" => Ok(Channel::SamplingMask),
                "top_p" => Ok(Channel::TopP),
                _ => Err(Self::bad(
                    "channel",
                    v,
                    "expected routed_experts, weight_versions, sampling_mask or top_p",
                )),
            })
            .transpose()
    }

    fn non_finite(&mut self) -> Result<Option<NonFinite>, FaultError> {
        self.raw("value")
            .map(|v| match v {
                "NaN" => Ok(NonFinite::NaN),
                "Infinity" => Ok(NonFinite::Infinity),
                "-Infinity" => Ok(NonFinite::NegInfinity),
                _ => Err(Self::bad("value", v, Self::VALUE_REASON)),
            })
            .transpose()
    }

    fn finite(&mut self) -> Result<Option<NumberLiteral>, FaultError> {
        self.raw("value")
            .map(|v| match v.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(NumberLiteral(v.to_owned())),
                _ => Err(Self::bad("value", v, Self::VALUE_REASON)),
            })
            .transpose()
    }

    /// The typed fault of `kind` from the given parameters, each missing one at its default.
    fn build(mut self, kind: FaultKind) -> Result<Fault, FaultError> {
        use default::*;
        let fault = match kind {
            FaultKind::Status => Fault::Http(HttpFault::Status {
                code: self.status()?.unwrap_or(STATUS_CODE),
                retry_after: self.int("retry_after")?.unwrap_or(RETRY_AFTER_SECS),
                message: self.text("message"),
            }),
            FaultKind::Delay => Fault::Http(HttpFault::Delay {
                ms: self.int("ms")?.unwrap_or(DELAY_MS),
            }),
            FaultKind::Hang => Fault::Http(HttpFault::Hang {
                ms: self.int("ms")?.unwrap_or(HANG_MS),
            }),
            FaultKind::Reset => Fault::Http(HttpFault::Reset),
            FaultKind::MissingMetaInfo => Fault::Body(BodyFault::MissingMetaInfo),
            FaultKind::MissingLogprobs => Fault::Body(BodyFault::MissingLogprobs),
            FaultKind::ShortLogprobs => Fault::Body(BodyFault::ShortLogprobs {
                by: self.int("by")?.unwrap_or(BY),
            }),
            FaultKind::LongLogprobs => Fault::Body(BodyFault::LongLogprobs {
                by: self.int("by")?.unwrap_or(BY),
            }),
            FaultKind::NullLogprob => Fault::Body(BodyFault::NullLogprob {
                at: self.int("at")?.unwrap_or(AT),
            }),
            FaultKind::NanLogprob => Fault::Body(BodyFault::NanLogprob {
                at: self.int("at")?.unwrap_or(AT),
                value: self.non_finite()?.unwrap_or(NonFinite::NaN),
            }),
            FaultKind::PositiveLogprob => Fault::Body(BodyFault::PositiveLogprob {
                at: self.int("at")?.unwrap_or(AT),
                value: self
                    .finite()?
                    .unwrap_or_else(|| NumberLiteral(POSITIVE_LOGPROB.to_owned())),
            }),
            FaultKind::WrongTokenId => Fault::Body(BodyFault::WrongTokenId {
                at: self.int("at")?.unwrap_or(AT),
            }),
            FaultKind::StringLogprob => Fault::Body(BodyFault::StringLogprob {
                at: self.int("at")?.unwrap_or(AT),
            }),
            FaultKind::DropChannel => Fault::Body(BodyFault::DropChannel {
                channel: self.channel()?.unwrap_or(Channel::RoutedExperts),
            }),
            FaultKind::ShortRoutes => Fault::Body(BodyFault::ShortRoutes {
                by: self.int("by")?.unwrap_or(BY),
            }),
            FaultKind::ExtraRoute => Fault::Body(BodyFault::ExtraRoute),
            FaultKind::RetractRoutes => Fault::Body(BodyFault::RetractRoutes),
            FaultKind::SpansGap => Fault::Body(BodyFault::SpansGap),
            FaultKind::SpansOverlap => Fault::Body(BodyFault::SpansOverlap),
            FaultKind::StaleVersion => Fault::Body(BodyFault::StaleVersion),
            FaultKind::MaskMissingToken => Fault::Body(BodyFault::MaskMissingToken {
                at: self.int("at")?.unwrap_or(AT),
            }),
            FaultKind::TwoElementLogprobs => Fault::Body(BodyFault::TwoElementLogprobs),
            FaultKind::PhantomLogprob => Fault::Body(BodyFault::PhantomLogprob),
            FaultKind::TruncatedBody => Fault::Stream(StreamFault::TruncatedBody {
                keep: self.int("keep")?,
            }),
            FaultKind::TruncateStream => Fault::Stream(StreamFault::TruncateStream {
                after: self.int("after")?.unwrap_or(AFTER),
            }),
            FaultKind::CutStream => Fault::Stream(StreamFault::CutStream {
                after: self.int("after")?.unwrap_or(AFTER),
            }),
            FaultKind::MalformedChunk => Fault::Stream(StreamFault::MalformedChunk {
                at: self.int("at")?.unwrap_or(AT),
            }),
            FaultKind::DuplicateChunk => Fault::Stream(StreamFault::DuplicateChunk {
                at: self.int("at")?.unwrap_or(AT),
            }),
            FaultKind::ErrorEvent => Fault::Stream(StreamFault::ErrorEvent {
                after: self.int("after")?.unwrap_or(AFTER),
                message: self.text("message"),
            }),
            FaultKind::Stall => Fault::Stream(StreamFault::Stall {
                ms: self.int("ms")?.unwrap_or(STALL_MS),
            }),
            FaultKind::AbortWaiting => Fault::Engine(EngineFault::AbortWaiting),
            FaultKind::AbortRunning => Fault::Engine(EngineFault::AbortRunning {
                after: self.int("after")?.unwrap_or(AFTER),
            }),
            FaultKind::AbortBeforePrefill => Fault::Engine(EngineFault::AbortBeforePrefill),
        };
        if let Some((param, _)) = self.given.iter().find(|(key, _)| !self.asked.contains(key)) {
            return Err(FaultError::UnknownParam {
                kind,
                param: (*param).to_owned(),
                accepted: self.asked,
            });
        }
        Ok(fault)
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
        accepted: Vec<&'static str>,
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

impl FromStr for Fault {
    type Err = FaultError;

    fn from_str(spec: &str) -> Result<Fault, FaultError> {
        let mut parts = spec.split(';').map(str::trim);
        let name = parts.next().unwrap_or("");
        let kind =
            FaultKind::from_name(name).ok_or_else(|| FaultError::UnknownKind(name.into()))?;
        let given = parts
            .filter(|p| !p.is_empty())
            .map(|part| {
                let (key, value) = part.split_once('=').unwrap_or((part, ""));
                (key.trim(), value.trim())
            })
            .collect();
        Params {
            given,
            asked: Vec::new(),
        }
        .build(kind)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind().name())?;
        for (k, v) in self.params() {
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
            if !generates(endpoint) && !rule.fault.is_http_level() {
                return bad(format!(
                    "{} only applies to {GENERATING_ENDPOINTS}, not {endpoint}",
                    rule.fault.kind()
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
        assert_eq!(fault, Fault::Stream(StreamFault::Stall { ms: 25 }));
        assert!(matches!(
            "status;code=429;message".parse::<Fault>(),
            Ok(Fault::Http(HttpFault::Status { code: 429, retry_after: 1, message: Some(m) })) if m.is_empty()
        ));
        assert_eq!(
            "positive-logprob;value=1e3"
                .parse::<Fault>()
                .unwrap()
                .to_string(),
            "positive-logprob;at=0;value=1e3"
        );
    }

    /// Every kind parses from its bare name into a fault of that kind, and every fault's canonical spec
    /// parses back into the same fault.
    #[test]
    fn every_kind_parses_and_its_spec_round_trips() {
        for &kind in FaultKind::ALL {
            let fault: Fault = kind.name().parse().unwrap();
            assert_eq!(fault.kind(), kind);
            assert_eq!(
                fault.to_string().parse::<Fault>(),
                Ok(fault.clone()),
                "{fault}"
            );
            assert_eq!(
                fault.is_http_level(),
                matches!(
                    kind,
                    FaultKind::Status | FaultKind::Delay | FaultKind::Hang | FaultKind::Reset
                ),
                "{kind}"
            );
        }
        let unknown = "cut-stream;at=1".parse::<Fault>();
        assert_eq!(
            unknown.map_err(|e| e.to_string()),
            Err("fault cut-stream takes no parameter \"at\"; it accepts [\"after\"]".to_owned())
        );
    }
}
