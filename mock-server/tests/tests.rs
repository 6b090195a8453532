//! Integration tests of `sglang-mock`, built as one binary with one module per area. The modules live in
//! `areas/` so that Cargo does not build each of them as a test binary of its own.

// The crates' own code lists every variant of their enums (the workspace's `wildcard_enum_match_arm`); a test's
// wildcard arm is its failure: anything but the variant it expects fails it.
#![allow(
    clippy::wildcard_enum_match_arm,
    reason = "a test's wildcard arm is the failure of anything unexpected"
)]

/// The per-token channels beside the logprobs: routed experts and sampling masks.
#[path = "areas/channels.rs"]
mod channels;
/// Servers (in-process and live), the SSE reader, order-preserving JSON, stream reassembly.
#[path = "areas/common.rs"]
mod common;
/// The control plane under concurrency: aborts, pause and continue, queue limits, weight versions, flush_cache.
#[path = "areas/control.rs"]
mod control;
/// The READMEs' flag and fault tables against the command line and the fault catalogue.
#[path = "areas/docs.rs"]
mod docs;
/// Worker endpoints, auth, 404/405, health, info, load, flush_cache, graceful shutdown.
#[path = "areas/endpoints.rs"]
mod endpoints;
/// Fault injection: each kind's bytes or connection behaviour, the header, the schedule, `/admin/stats`.
#[path = "areas/faults.rs"]
mod faults;
/// The spec's wire examples (§7) as golden files, checked key by key; values from the oracle.
#[path = "areas/golden.rs"]
mod golden;
/// The oracle replays what the outside world did: the abort-running fault, `/abort_request`, retract pauses.
#[path = "areas/interventions.rs"]
mod interventions;
/// The latency model on tokio's paused clock, and `/metrics`.
#[path = "areas/latency.rs"]
mod latency;
/// The model's documented properties on the wire, and the exact requests of the defects found by the reference.
#[path = "areas/model.rs"]
mod model;
/// The OpenAI-compatible routes: logprobs equal `/generate`'s, streams, errors, faults, the control plane.
#[path = "areas/openai.rs"]
mod openai;
/// Server output equals the oracle, non-streamed and streamed in every output mode.
#[path = "areas/oracle.rs"]
mod oracle;
/// `sglang-mock oracle` prints what the live server answers.
#[path = "areas/oracle_command.rs"]
mod oracle_command;
/// Property tests of logprob invariants against a live server.
#[path = "areas/properties.rs"]
mod properties;
/// A Python client reading logprobs the way slime does, against the live server.
#[path = "areas/python_client.rs"]
mod python_client;
/// Qwen's real vocabulary, built offline for the tests (the file is the regression suite's too).
#[path = "../../tests/qwen_tokenizer.rs"]
mod qwen_tokenizer;
/// The server against the independent Python reference model written from `MODEL.md`.
#[path = "areas/reference.rs"]
mod reference;
/// The releases read from their wheels: 0.5.23's contract decoder and each release's route table.
#[path = "areas/releases.rs"]
mod releases;
/// Scripted answers: chosen text with true logprobs, matched on decoded prompts, followed by the oracle.
#[path = "areas/scripted.rs"]
mod scripted;
/// SSE framing byte by byte, stream_interval, index on batch and n chunks, deltas.
#[path = "areas/streaming.rs"]
mod streaming;
/// The server against a trainer's tokenizer and chat template: `tokenizers`, transformers, tiktoken.
#[path = "areas/trainer_tokenizer.rs"]
mod trainer_tokenizer;
/// Every validation error: status, shape, message, non-streamed and streamed.
#[path = "areas/validation.rs"]
mod validation;
/// The model over a loaded vocabulary (Qwen's real tokenizer): what it derives, its slots, its errors, its text.
#[path = "areas/vocabulary.rs"]
mod vocabulary;
/// The witness: the ledger holds what each answer carried, and the audit endpoint and command read samples.
#[path = "areas/witness.rs"]
mod witness;
