//! An async SGLang client and rollout engine whose samples can never drop or misalign a logprob.
//!
//! The path from bytes to training data:
//!
//! 1. [`decode`] turns a `/generate` body into the typed structs of [`wire`] (a strict scanner, and
//!    behind it a serde visitor, fill the token ids and logprobs columns directly), and [`stream`]
//!    reassembles SSE streams in every mode SGLang has used into the same shape.
//! 2. [`Turn::from_response`] validates it: meta_info present, logprobs present when requested,
//!    aligned with `output_ids` token for token, and finite and `<= 0`, and every channel the request asked
//!    for ([`channels`]: routed experts, weight-version spans, sampling masks) held to the tokens; anything
//!    else is a [`ResponseError`] naming the field (or channel), index and value.
//! 3. [`Sample::apply_turn`] appends it to a [`Sample`] whose length invariants (the channels' too) are
//!    enforced by construction, and [`rollout`] drives multi-turn, partial and group rollouts over a
//!    retrying, concurrency-limited [`Client`].
//! 4. [`train`] hands the samples to `grpo` (rollout logprobs required), and [`multi_agent`] is slime's
//!    multi-agent example.
//!
//! The `rollout` command (prompts, rewards, a complete GRPO rollout on an embedded sglang-mock) is the
//! `rollout-cli` crate, so that linking this library brings in no server, flag parser or progress bar.

// The bottom: plain data, the errors every layer returns, the seeded generator.
pub mod error;
mod fields;
mod splitmix;
pub mod wire;

// Decoding, layer by layer: bytes to wire types, checks, turns, streams.
pub mod channels;
pub mod decode;
mod fast;
pub mod stream;
pub mod turn;
mod validate;
mod visitor;

// Samples, requests and the rollouts that build them.
mod carried;
pub mod client;
pub mod multi_agent;
mod record;
pub mod request;
pub mod rollout;
pub mod sample;
pub mod tokenize;
pub mod train;

// The decode benchmark's bodies.
pub mod synth;

pub use client::{Client, ClientBuilder, RetryPolicy};
pub use error::{ClientError, ResponseError, RolloutError, SampleError};
pub use request::{
    AbortRequest, CustomParams, GenerateRequest, IdsInput, SamplingParams, TextInput,
};
pub use sample::{GeneratedSpan, Prompt, Reward, Sample, SampleStatus, Segment};
pub use stream::StreamDecoder;
pub use turn::Turn;
pub use wire::{FinishReason, GenerateResponse, MetaInfo, StopMatch, StreamMode, TokenLogprobs};
