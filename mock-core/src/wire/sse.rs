//! Server-sent-event framing and the stream's cadence: when a chunk is due, and in which output mode.

use bytes::Bytes;

use super::item::OutputMode;
use crate::config::{ServerConfig, SglangVersion};
use crate::release::{ErrorFrame, StreamIds};

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
pub fn error_stream_body(message: &str, version: SglangVersion) -> Bytes {
    let mut out = sse_event(&error_event(message, version)).to_vec();
    out.extend_from_slice(DONE_EVENT);
    Bytes::from(out)
}

/// The error event a stream carries instead of a 4xx, as `stream_results` in `srt/entrypoints/http_server.py`
/// writes a `ValueError`: `{"error":{"message"}}` in 0.5.3, and from 0.5.15 with the OpenAI-style `type`,
/// `code` (400: a `ValueError` has no `status_code`) and `retryable`.
pub fn error_event(message: &str, version: SglangVersion) -> Vec<u8> {
    let error = match version.error_frame {
        ErrorFrame::MessageOnly => ErrorFields {
            message,
            typed: None,
        },
        ErrorFrame::Typed => ErrorFields {
            message,
            typed: Some(Typed {
                r#type: "invalid_request_error",
                code: 400,
                retryable: false,
            }),
        },
    };
    // Serialising strings, an integer and a bool into a `Vec` cannot fail.
    serde_json::to_vec(&ErrorEvent { error }).unwrap_or_default()
}

#[derive(serde::Serialize)]
struct ErrorEvent<'a> {
    error: ErrorFields<'a>,
}

#[derive(serde::Serialize)]
struct ErrorFields<'a> {
    message: &'a str,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    typed: Option<Typed>,
}

#[derive(serde::Serialize)]
struct Typed {
    r#type: &'static str,
    code: u16,
    retryable: bool,
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
