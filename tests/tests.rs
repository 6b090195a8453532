//! The regression suite for slime issue #1976: the mock server, the rollout client and GRPO, driven together.
//!
//! Every property test owns one tokio runtime and one in-process `sglang-mock` (bound to
//! 127.0.0.1:0) for all its cases, and runs `PROPTEST_CASES` cases (default [`common::cases`]).

// The crates' own code lists every variant of their enums (the workspace's `wildcard_enum_match_arm`); a test's
// wildcard arm is its failure: anything but the variant it expects fails it.
#![allow(
    clippy::wildcard_enum_match_arm,
    reason = "a test's wildcard arm is the failure of anything unexpected"
)]

/// Aborts during a rollout: partial samples keep tokens and logprobs, resume, and mask the off-policy prefix.
mod aborts;
/// slime's multi-agent example on a scripted mock: every reward-shaping branch, oracle logprobs, one rollout id.
mod agents;
/// The workspace's shape: no import cycles, layers pointing down, a client library without the server or CLI.
mod architecture;
/// Shared helpers: the per-test runtime and server, the oracle replay of a sample, proptest config.
mod common;
/// Every fault kind of the catalogue against every kind of rollout, streamed or not, with retries off and on.
mod fault_matrix;
/// Faulted server responses become typed client errors, never samples.
mod faults;
/// The #1976 path itself: dropped logprobs cannot become a sample, and GRPO names the sample without them.
mod issue_1976;
/// The module graph of a crate, parsed from its source: references between modules and external crates.
mod module_graph;
/// Qwen's real vocabulary, built offline for the tests (shared with `mock-server`'s tests).
mod qwen_tokenizer;
/// A real BPE (Qwen's vocabulary) drifts when generated ids go through text and back; the client never does.
mod retokenization;
/// Random valid rollouts (groups, sampling parameters, multi-turn, multi-agent, streaming) through to GRPO.
mod rollouts;
/// The witness: the client's own samples pass the server's audit, and a single corruption is reported where it is.
mod witness;
