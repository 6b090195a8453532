//! An async SGLang client and rollout engine whose samples can never drop or misalign a logprob.
//!
//! The path from bytes to training data:
//!
//! 1. [`wire`] decodes a `/generate` body into typed structs (a custom visitor fills the token
//!    ids and logprobs columns directly), and [`stream`] reassembles SSE streams in every mode
//!    SGLang has used into the same shape.
//! 2. [`Turn::from_response`] validates it: meta_info present, logprobs present when requested,
//!    aligned with `output_ids` token for token, and finite and `<= 0`; anything else is a
//!    [`ResponseError`] naming the field, index and value.
//! 3. [`Sample::apply_turn`] appends it to a [`Sample`] whose length invariants are enforced by
//!    construction, and [`rollout`] drives multi-turn, partial and group rollouts over a
//!    retrying, concurrency-limited [`Client`].
//! 4. [`train`] hands the samples to `grpo` (rollout logprobs required), and [`multi_agent`] is slime's
//!    multi-agent example.
//!
//! The `rollout` command (prompts, rewards, a complete GRPO rollout on an embedded sglang-mock) is the
//! `rollout-cli` crate, so that linking this library brings in no server, flag parser or progress bar.

pub mod client;
pub mod error;
mod fast;
pub mod multi_agent;
pub mod request;
pub mod rollout;
pub mod sample;
pub mod stream;
pub mod synth;
pub mod tokenize;
pub mod train;
pub mod turn;
pub mod wire;

pub use client::{Client, ClientBuilder, RetryPolicy};
pub use error::{ClientError, ResponseError, RolloutError, SampleError};
pub use request::{AbortRequest, GenerateRequest, IdsInput, SamplingParams, TextInput};
pub use sample::{GeneratedSpan, Prompt, Reward, Sample, SampleStatus, Segment};
pub use stream::{StreamDecoder, StreamMode};
pub use turn::Turn;
pub use wire::{FinishReason, GenerateResponse, MetaInfo, StopMatch, TokenLogprobs};
