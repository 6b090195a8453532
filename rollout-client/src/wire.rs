//! The wire types of SGLang's `/generate` responses (spec sections 2 and 3): plain data, the bottom of decoding.
//!
//! Nothing here reads bytes or checks that a response makes sense. The layers above, each importing only the
//! ones below, are: `fast.rs` and `visitor.rs` (bytes into these types: the strict scanner for the big token
//! arrays and the serde visitor that fills `Vec<u32>` ids and `Vec<f32>` logprobs from `[[lp, id, text], ...]`),
//! `decode.rs` (a body: the fast path, else serde_json, with typed JSON errors), `validate.rs` (the checks of
//! issue #1976), and `turn.rs` (a validated `Turn`).

use std::fmt;

use serde::{Deserialize, Serialize};

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
    /// With `return_prompt_token_ids` (0.5.15 and later).
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
    // 0.5.15 and later.
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
    /// Base64 MoE routing replay data: little-endian int32 rows (`channels.rs`).
    pub routed_experts: Option<String>,
    /// \[0.5.23\] Which weight version made which output tokens.
    pub weight_versions: Option<Vec<VersionSpan>>,
    /// \[0.5.23\] With `return_sampling_mask`: the sampler's support per output token.
    pub output_token_sampling_mask: Option<Vec<Vec<u32>>>,
    /// \[0.5.23\] The support's renormalised logprobs: the sampled token's, or the whole support's.
    pub output_token_sampling_logprobs: Option<SamplingLogprobs>,
    /// \[0.5.23\] The number of output tokens with a mask.
    pub output_token_sampling_mask_length: Option<usize>,
    /// slime's patched 0.5.15 (`custom_params.return_top_p_token_ids`): every output token's kept ids, one after
    /// the other, as base64 of little-endian int32; on a finished item's object only.
    pub top_p_token_ids: Option<String>,
    /// The rows' offsets into `top_p_token_ids`, from 0, one more than the output tokens (same encoding).
    pub top_p_token_offsets: Option<String>,
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

/// One entry of `weight_versions`: output tokens `start..end` came from `version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionSpan {
    pub version: String,
    pub start: usize,
    pub end: usize,
}

/// `output_token_sampling_logprobs`: one value per token (`sampling_logprobs_mode: "selected"`) or one list per
/// token aligned with its support (`"support"`); `null` is a non-finite value.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum SamplingLogprobs {
    Selected(Vec<Option<f32>>),
    Support(Vec<Vec<Option<f32>>>),
}

impl SamplingLogprobs {
    /// The rows: tokens with a mask.
    pub fn len(&self) -> usize {
        match self {
            SamplingLogprobs::Selected(v) => v.len(),
            SamplingLogprobs::Support(v) => v.len(),
        }
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `more`'s rows (a delta chunk of an incremental stream); a chunk of the other mode replaces them.
    pub fn extend_from(&mut self, more: SamplingLogprobs) {
        match (self, more) {
            (SamplingLogprobs::Selected(a), SamplingLogprobs::Selected(b)) => a.extend(b),
            (SamplingLogprobs::Support(a), SamplingLogprobs::Support(b)) => a.extend(b),
            // An empty delta reads as "selected": it adds nothing.
            (_, SamplingLogprobs::Selected(b)) if b.is_empty() => {}
            (this, more) => *this = more,
        }
    }
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
    #[expect(
        clippy::wildcard_enum_match_arm,
        reason = "a JSON value's type check: any other JSON type is the refusal"
    )]
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
    /// SGLang 0.5.3 copies the request's `max_new_tokens` here as it was given, so a request that sent `4.0`
    /// is answered `"length": 4.0` (seen on the running release): a float with no fractional part counts.
    #[serde(default, deserialize_with = "whole_number")]
    length: Option<u64>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    status_code: Option<u16>,
    #[serde(default)]
    err_type: Option<String>,
}

/// A JSON integer, or a float with no fractional part that fits in a `u64`.
fn whole_number<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Int(u64),
        Float(f64),
    }
    match Option::<Number>::deserialize(deserializer)? {
        None => Ok(None),
        Some(Number::Int(n)) => Ok(Some(n)),
        Some(Number::Float(f)) if f.fract() == 0.0 && (0.0..1.8e19).contains(&f) => {
            Ok(Some(f as u64))
        }
        Some(Number::Float(f)) => Err(serde::de::Error::custom(format!(
            "finish_reason.length {f} is not a whole number"
        ))),
    }
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

/// How a server streams `text`, `output_ids` and `output_token_logprobs` (spec section 3): which of them are
/// cumulative and which are deltas. `stream.rs` explains each mode and how [`StreamMode::Auto`] detects them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamMode {
    #[default]
    Auto,
    Cumulative,
    Incremental,
    Mid,
}
