//! Server-sent-event framing and the stream's cadence: when a chunk is due, and in which output mode.

use bytes::Bytes;

use super::item::OutputMode;
use crate::config::{ServerConfig, SglangVersion};
use crate::error::ApiError;
use crate::release::StreamIds;

/// The terminator of every `/generate` stream.
pub const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";

/// `data: <json>\n\n`.
pub fn sse_event(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The body of a stream whose request failed validation: the error event, then `[DONE]`.
pub fn error_stream_body(err: &ApiError, version: SglangVersion) -> Bytes {
    let mut out = sse_event(&err.stream_event_json(version)).to_vec();
    out.extend_from_slice(DONE_EVENT);
    Bytes::from(out)
}

/// The output mode of streamed chunks under this configuration.
pub fn stream_mode(config: &ServerConfig) -> OutputMode {
    match (
        config.sglang_version.stream_ids,
        config.incremental_streaming_output,
    ) {
        (StreamIds::Delta, _) => OutputMode::DeltaIds,
        (StreamIds::Cumulative, true) => OutputMode::Incremental,
        (StreamIds::Cumulative, false) => OutputMode::Cumulative,
    }
}
