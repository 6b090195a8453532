//! Typed decoding of SGLang `/generate` response bodies (spec sections 2 and 3), straight from bytes.
//!
//! Nothing here checks that a response makes sense; that is `turn.rs`. This module only turns bytes
//! into typed values, and the hot path (`output_token_logprobs`) goes through a hand-written visitor
//! that fills `Vec<u32>` ids and `Vec<f32>` logprobs without building a value per triple.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::error::ResponseError;
use crate::fast;

/// One `/generate` response object, or one streamed chunk (same shape plus `index`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct GenerateResponse {
    /// The detokenized completion; absent on `--skip-tokenizer-init` servers.
    pub text: Option<String>,
    /// Generated token ids, untrimmed (EOS and stop tokens included).
    pub output_ids: Option<Vec<u32>>,
    pub meta_info: Option<MetaInfo>,
    /// Position in the flattened request list; only in streamed batch or `n > 1` chunks.
    pub index: Option<usize>,
    /// [LATEST] with `return_prompt_token_ids`.
    pub prompt_token_ids: Option<Vec<u32>>,
    /// Only on a streamed error event: `data: {"error":{"message":...}}` sent with HTTP 200.
    pub error: Option<ErrorDetail>,
}

/// `meta_info`: every key in the spec (section 2.2 and 2.4); unknown keys are ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct MetaInfo {
    pub id: Option<String>,
    /// `null` while a streamed request is still running, and absent when the server forgot it.
    pub finish_reason: Option<FinishReason>,
    pub prompt_tokens: Option<usize>,
    pub weight_version: Option<String>,
    pub completion_tokens: Option<usize>,
    pub cached_tokens: Option<usize>,
    pub e2e_latency: Option<f64>,
    // [LATEST] additions.
    pub num_retractions: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    pub response_sent_to_client_ts: Option<f64>,
    pub output_token_logprobs_length: Option<usize>,
    // Logprob keys, present only with `return_logprob`.
    pub input_token_logprobs: Option<TokenLogprobs>,
    pub output_token_logprobs: Option<TokenLogprobs>,
    pub input_top_logprobs: Option<Vec<Option<Vec<LogprobTriple>>>>,
    pub output_top_logprobs: Option<Vec<Option<Vec<LogprobTriple>>>>,
    pub input_token_ids_logprobs: Option<Vec<Option<Vec<LogprobTriple>>>>,
    pub output_token_ids_logprobs: Option<Vec<Option<Vec<LogprobTriple>>>>,
    // Conditional keys. The two free-form ones are rare and off the hot path, so a `Value` is fine.
    pub cached_tokens_details: Option<serde_json::Value>,
    pub dp_rank: Option<i64>,
    pub hidden_states: Option<serde_json::Value>,
    /// Base64 MoE routing replay data.
    pub routed_experts: Option<String>,
    pub image_tokens: Option<u64>,
    pub audio_tokens: Option<u64>,
    pub video_tokens: Option<u64>,
    // Speculative decoding. Counts are read as f64 because versions disagree on int vs float.
    pub spec_accept_rate: Option<f64>,
    pub spec_accept_length: Option<f64>,
    pub spec_verify_ct: Option<f64>,
    pub spec_num_correct_drafts: Option<f64>,
    pub spec_num_proposed_drafts: Option<f64>,
    pub spec_accepted_drafts: Option<f64>,
    pub spec_proposed_drafts: Option<f64>,
    pub spec_correct_drafts_histogram: Option<Vec<f64>>,
    pub spec_accept_histogram: Option<Vec<f64>>,
}

/// The body of an error: `{"message","type","param","code"}`, inside `{"error":...}` or flat.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ErrorDetail {
    pub message: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub code: Option<ErrorCode>,
}

/// `code` is an int (`{"object":"error",...,"code":400}`) or a string (`"model_not_found"`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ErrorCode {
    Int(i64),
    Str(String),
}

/// Any error body SGLang sends: `{"error":{...}}`, `{"object":"error","message",...}` or FastAPI's
/// old `{"detail": ...}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    pub error: Option<ErrorDetail>,
    pub object: Option<String>,
    pub message: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub detail: Option<serde_json::Value>,
}

impl ErrorBody {
    /// The human-readable message, whichever shape carried it.
    pub fn message(&self) -> Option<String> {
        if let Some(m) = self.error.as_ref().and_then(|e| e.message.clone()) {
            return Some(m);
        }
        if let Some(m) = &self.message {
            return Some(m.clone());
        }
        self.detail.as_ref().map(|d| match d {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

/// `meta_info.finish_reason` (spec section 2.3).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "RawFinishReason")]
pub enum FinishReason {
    /// EOS, a stop token (`matched` is an int) or a stop string or regex (`matched` is a string).
    Stop { matched: Option<StopMatch> },
    /// `length` is the request's `max_new_tokens`, not the number of tokens produced.
    Length { length: u64 },
    /// Three shapes: running (`status_code`/`err_type` present, possibly null), waiting queue and
    /// before prefill (only `type` and `message`).
    Abort {
        message: Option<String>,
        status_code: Option<u16>,
        err_type: Option<String>,
    },
    /// A type this client does not know. slime leaves the status unchanged for these.
    Other { kind: String },
}

impl FinishReason {
    pub fn is_abort(&self) -> bool {
        matches!(self, FinishReason::Abort { .. })
    }

    /// The wire `type` string.
    pub fn kind(&self) -> &str {
        match self {
            FinishReason::Stop { .. } => "stop",
            FinishReason::Length { .. } => "length",
            FinishReason::Abort { .. } => "abort",
            FinishReason::Other { kind } => kind,
        }
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FinishReason::Stop {
                matched: Some(StopMatch::Token(t)),
            } => write!(f, "stop (token {t})"),
            FinishReason::Stop {
                matched: Some(StopMatch::Text(s)),
            } => write!(f, "stop ({s:?})"),
            FinishReason::Stop { matched: None } => write!(f, "stop"),
            FinishReason::Length { length } => write!(f, "length ({length})"),
            FinishReason::Abort { message, .. } => {
                write!(f, "abort ({:?})", message.as_deref().unwrap_or(""))
            }
            FinishReason::Other { kind } => write!(f, "{kind}"),
        }
    }
}

/// What a `stop` finish matched: a token id or a stop string/regex.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum StopMatch {
    Token(u64),
    Text(String),
}

#[derive(Deserialize)]
struct RawFinishReason {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    matched: Option<StopMatch>,
    #[serde(default)]
    length: Option<u64>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    status_code: Option<u16>,
    #[serde(default)]
    err_type: Option<String>,
}

impl TryFrom<RawFinishReason> for FinishReason {
    type Error = String;

    fn try_from(raw: RawFinishReason) -> Result<Self, Self::Error> {
        Ok(match raw.kind.as_str() {
            "stop" => FinishReason::Stop {
                matched: raw.matched,
            },
            "length" => FinishReason::Length {
                length: raw
                    .length
                    .ok_or("finish_reason of type \"length\" has no \"length\" key")?,
            },
            "abort" => FinishReason::Abort {
                message: raw.message,
                status_code: raw.status_code,
                err_type: raw.err_type,
            },
            _ => FinishReason::Other { kind: raw.kind },
        })
    }
}

/// One `[logprob|null, token_id, token_text|null]` triple, as found in the top-logprob lists.
#[derive(Debug, Clone, PartialEq)]
pub struct LogprobTriple {
    pub logprob: Option<f32>,
    pub token_id: u32,
    pub text: Option<String>,
}

impl<'de> Deserialize<'de> for LogprobTriple {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (logprob, token_id, text) = <(Option<f32>, u32, Option<String>)>::deserialize(d)?;
        Ok(LogprobTriple {
            logprob,
            token_id,
            text,
        })
    }
}

/// `input_token_logprobs` / `output_token_logprobs`, decoded column-wise.
///
/// The per-token text is validated as JSON and skipped: the completion text is in `text`, and
/// keeping one `String` per token would cost an allocation per token on the hot path.
/// A `null` logprob is stored as NaN so positions stay aligned, and its index is listed in
/// `nulls`; `turn.rs` turns either into a typed error before anything reaches a `Sample`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenLogprobs {
    pub ids: Vec<u32>,
    pub logprobs: Vec<f32>,
    /// Indices whose logprob was JSON `null`, ascending.
    pub nulls: Vec<usize>,
}

impl TokenLogprobs {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Appends `other` (an incremental stream delta), keeping null indices global.
    pub fn extend_from(&mut self, other: &TokenLogprobs) {
        let base = self.ids.len();
        self.ids.extend_from_slice(&other.ids);
        self.logprobs.extend_from_slice(&other.logprobs);
        self.nulls.extend(other.nulls.iter().map(|i| i + base));
    }
}

impl<'de> Deserialize<'de> for TokenLogprobs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(TokenLogprobsVisitor)
    }
}

struct TokenLogprobsVisitor;

impl<'de> Visitor<'de> for TokenLogprobsVisitor {
    type Value = TokenLogprobs;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of [logprob, token_id, token_text] triples")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // serde_json gives no size hint; 4096-token responses need 12 doublings, which is cheap
        // next to parsing, so no guessing here.
        let cap = seq.size_hint().unwrap_or(0);
        let mut out = TokenLogprobs {
            ids: Vec::with_capacity(cap),
            logprobs: Vec::with_capacity(cap),
            nulls: Vec::new(),
        };
        while seq
            .next_element_seed(TripleSeed { out: &mut out })?
            .is_some()
        {}
        Ok(out)
    }
}

/// Decodes one triple and pushes its parts straight into the columns.
struct TripleSeed<'a> {
    out: &'a mut TokenLogprobs,
}

impl<'de> DeserializeSeed<'de> for TripleSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TripleSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a [logprob, token_id, token_text] triple")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let index = self.out.ids.len();
        // Read as f64 so an out-of-range value narrows to an infinity that validation reports,
        // instead of serde silently rejecting or clamping it.
        let logprob: Option<f64> = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let id: u32 = seq
            .next_element()?
            .ok_or_else(|| de::Error::invalid_length(1, &self))?;
        seq.next_element::<IgnoredAny>()?
            .ok_or_else(|| de::Error::invalid_length(2, &self))?;
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(de::Error::invalid_length(4, &self));
        }
        self.out.ids.push(id);
        match logprob {
            Some(lp) => self.out.logprobs.push(lp as f32),
            None => {
                self.out.logprobs.push(f32::NAN);
                self.out.nulls.push(index);
            }
        }
        Ok(())
    }
}

/// A non-stream body: one object, or an array for batches and `n > 1`.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseBody {
    One(Box<GenerateResponse>),
    Many(Vec<GenerateResponse>),
}

impl ResponseBody {
    pub fn into_vec(self) -> Vec<GenerateResponse> {
        match self {
            ResponseBody::One(r) => vec![*r],
            ResponseBody::Many(v) => v,
        }
    }
}

/// Decodes a non-stream `/generate` body, choosing object or array by its first byte so serde
/// never has to buffer the body to try both.
pub fn decode_body(body: &[u8]) -> Result<ResponseBody, ResponseError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace()).copied();
    if first == Some(b'[') {
        if let Some(v) = fast::responses(body) {
            return Ok(ResponseBody::Many(v));
        }
        serde_json::from_slice(body)
            .map(ResponseBody::Many)
            .map_err(|e| json_error(body, e))
    } else {
        decode_response(body).map(|r| ResponseBody::One(Box::new(r)))
    }
}

/// Decodes a single response object (a non-stream body or one SSE `data:` payload).
///
/// The hand-written fast path (`fast.rs`) handles plain valid bodies; anything else, including
/// every malformed body, goes through serde_json, which gives the same result or the typed error.
pub fn decode_response(body: &[u8]) -> Result<GenerateResponse, ResponseError> {
    match fast::response(body) {
        Some(r) => Ok(r),
        None => decode_response_serde(body),
    }
}

/// The hand-written fast path alone: `None` means the body is not the plain valid case and
/// [`decode_response`] would use serde_json. Exposed so tests can hold the two paths together.
pub fn decode_response_fast(body: &[u8]) -> Option<GenerateResponse> {
    fast::response(body)
}

/// The hand-written fast path alone for an array body (a batch or `n > 1`); `None` means
/// [`decode_body`] would use serde_json.
pub fn decode_array_fast(body: &[u8]) -> Option<Vec<GenerateResponse>> {
    fast::responses(body)
}

/// The serde_json path alone (the derived impls plus the logprob visitor); the reference the fast
/// path is tested against.
pub fn decode_response_serde(body: &[u8]) -> Result<GenerateResponse, ResponseError> {
    serde_json::from_slice(body).map_err(|e| json_error(body, e))
}

/// Decodes an error body of any SGLang shape; `None` when it is not JSON (e.g. plain-text 500).
pub fn decode_error_body(body: &[u8]) -> Option<ErrorBody> {
    serde_json::from_slice(body).ok()
}

/// Maps a serde_json error to the typed error a user should see.
///
/// serde_json (correctly) refuses the bare `NaN`/`Infinity` some Python encoders write for a
/// non-finite logprob, but its message is just "expected value at line 1 column 812". When the
/// bytes at that position are such a literal, say so, because that is the actual problem.
pub(crate) fn json_error(body: &[u8], err: serde_json::Error) -> ResponseError {
    if err.is_syntax()
        && let Some(literal) = non_finite_literal_at(body, err.line(), err.column())
    {
        return ResponseError::NonFiniteLiteral {
            literal,
            line: err.line(),
            column: err.column(),
            source: err,
        };
    }
    ResponseError::Json(err)
}

fn non_finite_literal_at(body: &[u8], line: usize, column: usize) -> Option<&'static str> {
    let mut start = 0;
    for _ in 1..line {
        start += body[start..].iter().position(|&b| b == b'\n')? + 1;
    }
    // serde_json reports the peeked byte, 1-based, sometimes one past it; look a little around.
    let at = start + column.saturating_sub(1);
    for off in [at, at.saturating_sub(1), at.saturating_sub(2)] {
        let rest = body.get(off..)?;
        if rest.starts_with(b"NaN") {
            return Some("NaN");
        }
        if rest.starts_with(b"-Infinity") {
            return Some("-Infinity");
        }
        if rest.starts_with(b"Infinity") {
            return Some(if off > 0 && body[off - 1] == b'-' {
                "-Infinity"
            } else {
                "Infinity"
            });
        }
    }
    None
}
