//! Integration tests of rollout-client, built as one binary (one `mod` per area).

// The crates' own code lists every variant of their enums (the workspace's `wildcard_enum_match_arm`); a test's
// wildcard arm is its failure: anything but the variant it expects fails it.
#![allow(
    clippy::wildcard_enum_match_arm,
    reason = "a test's wildcard arm is the failure of anything unexpected"
)]

/// The channels beside the logprobs (routes, weight-version spans, sampling masks), from the wire into `Sample`.
mod channels;
/// Shared helpers: fixture loading, the data-driven `check`, and a scripted HTTP/1.1 server.
mod common;
/// Non-stream bodies from `tests/data/`: every shape of spec sections 2 and 7 and every malformed variant.
mod decode;
/// End to end against `sglang-mock` in-process, every answer checked against its oracle.
mod e2e;
/// `Client` against the scripted server: retries, Retry-After, timeouts, cut streams, error bodies.
mod http;
/// Every `/generate` answer the real releases sent (the golden recordings) through the decoder.
mod real_releases;
/// Rollouts against a scripted generating server: multi-turn, budgets, partial resume, groups.
mod rollout;
/// `Sample`: invariants (including proptest over random appends), status mapping, JSONL.
mod sample;
/// SSE framing and stream reassembly: all three modes, frames split anywhere, errors, batches.
mod stream;
