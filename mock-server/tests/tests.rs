//! Integration tests of `sglang-mock`, built as one binary with one module per area (the crate turns Cargo's
//! automatic test targets off, so the areas beside this file are modules of it, not binaries of their own).

// The crates' own code lists every variant of their enums (the workspace's `wildcard_enum_match_arm`); a test's
// wildcard arm is its failure: anything but the variant it expects fails it.
#![allow(
    clippy::wildcard_enum_match_arm,
    reason = "a test's wildcard arm is the failure of anything unexpected"
)]

/// The per-token channels beside the logprobs: routed experts and sampling masks.
mod channels;
/// Servers (in-process and live), the SSE reader, order-preserving JSON, stream reassembly.
mod common;
/// The control plane under concurrency: aborts, pause and continue, queue limits, weight versions, flush_cache.
mod control;
/// The READMEs' flag and fault tables against the command line and the fault catalogue.
mod docs;
/// Worker endpoints, auth, 404/405, health, info, load, flush_cache, graceful shutdown.
mod endpoints;
/// Fault injection: each kind's bytes or connection behaviour, the header, the schedule, `/admin/stats`.
mod faults;
/// The spec's wire examples (§7) as golden files, checked key by key; values from the oracle.
mod golden;
/// The oracle replays what the outside world did: the abort-running fault, `/abort_request`, retract pauses.
mod interventions;
/// Record, replay and conform against the mock itself, and the golden recordings of the real releases.
mod judge;
/// The latency model on tokio's paused clock, and `/metrics`.
mod latency;
/// `/v1/loads` and `/get_load`: what the running releases report idle and with a request waiting, in each
/// release's shape.
mod loads;
/// The model's documented properties on the wire, and the exact requests of the defects found by the reference.
mod model;
/// The OpenAI-compatible routes: logprobs equal `/generate`'s, streams, errors, faults, the control plane.
mod openai;
/// Server output equals the oracle, non-streamed and streamed in every output mode.
mod oracle;
/// `sglang-mock oracle` prints what the live server answers.
mod oracle_command;
/// The toy policy's weights: served from `--model-path`, replaced by `/update_weights_from_disk`, kept on failure.
mod policy;
/// The radix prefix cache: `cached_tokens` as the running releases reported them, pages, eviction, the
/// oracle's history, the OpenAI cache report.
mod prefix_cache;
/// Property tests of logprob invariants against a live server.
mod properties;
/// A Python client reading logprobs the way slime does, against the live server.
mod python_client;
/// Qwen's real vocabulary, built offline for the tests (the file is the regression suite's too).
#[path = "../../tests/qwen_tokenizer.rs"]
mod qwen_tokenizer;
/// The server against the independent Python reference model written from `MODEL.md`.
mod reference;
/// The releases read from their wheels: 0.5.23's contract decoder and each release's route table.
mod releases;
/// The batch scheduler of a bounded KV pool: the real server's queueing and retractions replayed, and the
/// loop under the control plane.
mod sched;
/// Scripted answers: chosen text with true logprobs, matched on decoded prompts, followed by the oracle.
mod scripted;
/// SSE framing byte by byte, stream_interval, index on batch and n chunks, deltas.
mod streaming;
/// The server against a trainer's tokenizer and chat template: `tokenizers`, transformers, tiktoken.
mod trainer_tokenizer;
/// Every validation error: status, shape, message, non-streamed and streamed.
mod validation;
/// The model over a loaded vocabulary (Qwen's real tokenizer): what it derives, its slots, its errors, its text.
mod vocabulary;
/// The witness: the ledger holds what each answer carried, and the audit endpoint and command read samples.
mod witness;
