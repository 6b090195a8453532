//! Typed errors: what was wrong with a response, a sample or a request, and with which value.
//!
//! Every layer of the crate returns these, so this module sits at the bottom: it names only the plain types
//! its variants carry (a sample status, a stream mode) and nothing that produces the errors.

use std::time::Duration;

use crate::fields::SampleStatus;
use crate::wire::StreamMode;

/// A `/generate` response that cannot become a `Turn`: bad JSON, a missing key, or
/// logprobs that are missing, misaligned or impossible.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResponseError {
    #[error("response body is not valid JSON for a /generate response")]
    Json(#[source] serde_json::Error),
    #[error(
        "response body contains the bare literal `{literal}` at line {line} column {column}; JSON has \
         no NaN or Infinity, so the server wrote a non-finite logprob with a non-compliant encoder"
    )]
    NonFiniteLiteral {
        literal: &'static str,
        line: usize,
        column: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("expected one response object but the body is an array of {len}")]
    ExpectedObject { len: usize },
    #[error("expected {expected} response items but got {got}")]
    ItemCount { expected: usize, got: usize },
    #[error("`meta_info` is missing")]
    MissingMetaInfo,
    #[error("`meta_info.finish_reason` is missing or null in a final response")]
    MissingFinishReason,
    #[error("`output_ids` is missing and there is no `output_token_logprobs` to take the ids from")]
    MissingOutputIds,
    #[error(
        "`meta_info.output_token_logprobs` is missing although logprobs were requested \
         (finish_reason: {finish_reason})"
    )]
    MissingOutputLogprobs { finish_reason: String },
    #[error("`output_ids` has {ids} tokens but `output_token_logprobs` has {logprobs} entries")]
    LengthMismatch { ids: usize, logprobs: usize },
    #[error(
        "token id mismatch at index {index}: `output_ids` has {expected} but \
         `output_token_logprobs` has {got}"
    )]
    TokenIdMismatch {
        index: usize,
        expected: u32,
        got: u32,
    },
    #[error("logprob at index {index} (token {token_id}) is null")]
    NullLogprob { index: usize, token_id: u32 },
    #[error("logprob at index {index} (token {token_id}) is {value}, which is not finite")]
    NonFiniteLogprob {
        index: usize,
        token_id: u32,
        value: f32,
    },
    #[error(
        "logprob at index {index} (token {token_id}) is {value}, but a log-probability is <= 0"
    )]
    PositiveLogprob {
        index: usize,
        token_id: u32,
        value: f32,
    },
    #[error(
        "`meta_info.completion_tokens` is {completion_tokens} but `output_ids` has {ids} tokens"
    )]
    CompletionTokensMismatch {
        completion_tokens: usize,
        ids: usize,
    },
    #[error(
        "`meta_info.output_token_logprobs_length` is {declared} but `output_token_logprobs` has \
         {actual} entries"
    )]
    LogprobsLengthField { declared: usize, actual: usize },
    #[error(
        "`meta_info.input_token_logprobs` is missing or empty in a scoring request with \
         `logprob_start_len: 0` (prompt_tokens: {prompt_tokens:?}), so the prompt ids are unknown"
    )]
    MissingInputLogprobs { prompt_tokens: Option<usize> },
    #[error(
        "`meta_info.prompt_tokens` is {prompt_tokens} but `input_token_logprobs` has {entries} \
         entries with `logprob_start_len: 0`"
    )]
    InputLogprobsLength {
        prompt_tokens: usize,
        entries: usize,
    },
    #[error("the server sent an error event: {message}")]
    ServerError { message: String },
    #[error("item {index} of the response is invalid")]
    Item {
        index: usize,
        #[source]
        source: Box<ResponseError>,
    },
    #[error("the stream ended after {chunks} chunks without `data: [DONE]`")]
    StreamEndedWithoutDone { chunks: usize },
    #[error("`data: [DONE]` arrived but item {index} never got a final chunk with a finish_reason")]
    StreamIncomplete { index: usize },
    #[error("the stream sent data after `[DONE]`")]
    DataAfterDone,
    #[error("chunk {chunk} of item {index} does not fit {mode:?} streaming: {detail}")]
    StreamModeMismatch {
        index: usize,
        chunk: usize,
        mode: StreamMode,
        detail: String,
    },
    #[error("chunk {chunk} of item {index} arrived after that item's final chunk")]
    ChunkAfterFinish { index: usize, chunk: usize },
    #[error("chunk {chunk} of the stream is invalid")]
    Chunk {
        chunk: usize,
        #[source]
        source: Box<ResponseError>,
    },
    #[error("the request asked for `{channel}` and the response has none")]
    MissingChannel { channel: &'static str },
    #[error("`{channel}`{}: {problem}", position.map(|p| format!(" at position {p}")).unwrap_or_default())]
    BadChannel {
        channel: &'static str,
        /// The token position (in the sequence for routes, in the output otherwise), when one is at fault.
        position: Option<usize>,
        problem: String,
    },
}

impl ResponseError {
    pub(crate) fn in_item(self, index: usize) -> ResponseError {
        ResponseError::Item {
            index,
            source: Box::new(self),
        }
    }
}

/// A `Sample` operation that would break `rollout_log_probs.len() == loss_mask.len() ==
/// response_length` or store an impossible logprob. The sample is unchanged when this is returned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SampleError {
    #[error("{tokens} response tokens but {log_probs} log probs")]
    LengthMismatch { tokens: usize, log_probs: usize },
    #[error(
        "trainable response tokens require rollout log probabilities ({tokens} tokens, none given)"
    )]
    TrainableWithoutLogprobs { tokens: usize },
    #[error("log prob at response index {index} is {value}, which is not finite")]
    NonFiniteLogprob { index: usize, value: f32 },
    #[error("log prob at response index {index} is {value}, but a log-probability is <= 0")]
    PositiveLogprob { index: usize, value: f32 },
    #[error("loss mask at response index {index} is {value}; only 0 and 1 are allowed")]
    BadLossMask { index: usize, value: u8 },
    #[error(
        "cannot replace the prompt tokens: the sample already has {response_length} response tokens"
    )]
    PromptAfterResponse { response_length: usize },
    #[error(
        "sample invariant broken: tokens {tokens}, response_length {response_length}, \
         loss_mask {loss_mask}, rollout_log_probs {log_probs}"
    )]
    Invariant {
        tokens: usize,
        response_length: usize,
        loss_mask: usize,
        log_probs: usize,
    },
    #[error("sample has {response_length} response tokens but no `rollout_log_probs`")]
    MissingRolloutLogProbs { response_length: usize },
    #[error(
        "response token {index} lies outside every generated span (it is an environment token) but has \
         loss mask {mask} and log prob {log_prob}; environment tokens have mask 0 and log prob 0.0"
    )]
    EnvironmentTokenTrained {
        index: usize,
        mask: u8,
        log_prob: f32,
    },
    #[error(
        "{untrained} generated tokens have loss mask 0 but only {policy_masked} were masked by a named \
         policy: a generated token must be trained unless a policy masks it"
    )]
    GeneratedTokenUntrained {
        untrained: usize,
        policy_masked: usize,
    },
    #[error(
        "generated span {start}..{end} is out of order or outside the {response_length} response tokens"
    )]
    BadGeneratedSpan {
        start: usize,
        end: usize,
        response_length: usize,
    },
    #[error(
        "all {trained} trained log probs are exactly 0.0: placeholder values (a zero-filled list), not \
         the rollout engine's"
    )]
    PlaceholderLogprobs { trained: usize },
    #[error("`{channel}` has {got} rows where the tokens need {expected}")]
    ChannelMisaligned {
        channel: &'static str,
        expected: usize,
        got: usize,
    },
    #[error(
        "a generation turn without `{channel}` in a sample that carries it: its tokens would have none"
    )]
    ChannelMissingInTurn { channel: &'static str },
    #[error("`{channel}`{}: {problem}", position.map(|p| format!(" at response position {p}")).unwrap_or_default())]
    ChannelInvalid {
        channel: &'static str,
        position: Option<usize>,
        problem: String,
    },
}

/// Why a request to the server failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("base URL {url:?} is not an http:// URL")]
    InvalidBaseUrl { url: String },
    #[error("header {name:?} has an invalid name or value")]
    InvalidHeader { name: String },
    #[error("could not build the HTTP client")]
    Build(#[source] reqwest::Error),
    #[error("could not encode the request body")]
    Encode(#[source] serde_json::Error),
    #[error("could not connect to {url}")]
    Connect {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("request to {url} timed out")]
    Timeout {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("transport error talking to {url}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} answered HTTP {status}: {message}")]
    Status {
        url: String,
        status: u16,
        /// SGLang's message from either error shape, or the start of a non-JSON body.
        message: String,
        retry_after: Option<Duration>,
    },
    #[error(
        "the stream from {url} broke after {chunks} chunks; not retried, so no token is ever \
         received twice"
    )]
    StreamInterrupted {
        url: String,
        chunks: usize,
        #[source]
        source: reqwest::Error,
    },
    #[error("invalid response from {url}")]
    Response {
        url: String,
        #[source]
        source: ResponseError,
    },
    #[error("gave up after {attempts} attempts")]
    GaveUp {
        attempts: u32,
        #[source]
        last: Box<ClientError>,
    },
}

impl ClientError {
    /// The error itself, or for a client that gave up after retries, the last attempt's.
    fn last_attempt(&self) -> &ClientError {
        if let ClientError::GaveUp { last, .. } = self {
            last.last_attempt()
        } else {
            self
        }
    }

    /// The response-level error, if this is one (looking through retries).
    pub fn response_error(&self) -> Option<&ResponseError> {
        if let ClientError::Response { source, .. } = self.last_attempt() {
            Some(source)
        } else {
            None
        }
    }

    /// The HTTP status, if the server answered with an error status (looking through retries).
    pub fn status(&self) -> Option<u16> {
        if let ClientError::Status { status, .. } = self.last_attempt() {
            Some(*status)
        } else {
            None
        }
    }
}

/// A rollout step that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RolloutError {
    #[error("generation request failed")]
    Client(#[from] ClientError),
    #[error("the response does not fit the sample")]
    Sample(#[from] SampleError),
    #[error("cannot generate for a sample with status {status:?}")]
    NotGeneratable { status: SampleStatus },
    #[error("sample {index} of group {group_index} failed")]
    GroupMember {
        group_index: usize,
        index: usize,
        #[source]
        source: Box<RolloutError>,
    },
}
