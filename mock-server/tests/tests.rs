//! Integration tests of `sglang-mock`, built as one binary with one module per area.

/// Servers (in-process and live), the SSE reader, order-preserving JSON, stream reassembly.
mod common;
/// Worker endpoints, auth, 404/405, health, info, load, flush_cache, graceful shutdown.
mod endpoints;
/// The spec's wire examples (§7) as golden files, checked key by key; values from the oracle.
mod golden;
/// Server output equals the oracle, non-streamed and streamed in every output mode.
mod oracle;
/// Property tests of logprob invariants against a live server.
mod properties;
/// SSE framing byte by byte, stream_interval, index on batch and n chunks, deltas.
mod streaming;
/// Every validation error: status, shape, message, non-streamed and streamed.
mod validation;
