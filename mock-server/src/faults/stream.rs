//! Faults applied to what a generating route answers: a finished non-stream body, or the events of a stream.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use super::catalogue::{Fault, FaultKind};
use super::mutate::{is_body_fault, mutate_body};
use crate::error::ApiError;
use crate::wire::{DONE_EVENT, sse_event};

/// How a route writes its answers, for the faults that rewrite them.
#[derive(Debug, Clone, Copy)]
pub struct Format {
    /// A body or one stream event (JSON) under a body fault.
    pub mutate: fn(&Fault, &[u8]) -> Vec<u8>,
    /// The JSON of the event that `error-event` sends, from its message.
    pub error_event: fn(&str) -> Vec<u8>,
}

/// `/generate`'s answers: body faults splice SGLang's objects; the error event is `{"error":{"message"}}`,
/// as SGLang's `stream_results` writes a `ValueError`.
pub const NATIVE: Format = Format {
    mutate: mutate_body,
    error_event: native_error_event,
};

fn native_error_event(message: &str) -> Vec<u8> {
    ApiError::value(message).stream_event_json()
}

/// The non-stream body under `fault`: mutated, cut, or sent after a stall. A stream-only fault on a
/// non-stream request is a 400 that says so. Faults that act elsewhere leave the body alone.
pub async fn non_stream_body(
    fault: &Fault,
    body: Vec<u8>,
    format: Format,
) -> Result<Vec<u8>, ApiError> {
    match fault.kind {
        kind if is_body_fault(kind) => Ok((format.mutate)(fault, &body)),
        FaultKind::TruncatedBody => {
            let keep = fault.u64("keep", body.len() as u64 / 2) as usize;
            Ok(body[..keep.min(body.len().saturating_sub(1))].to_vec())
        }
        FaultKind::Stall => {
            tokio::time::sleep(Duration::from_millis(fault.u64("ms", 0))).await;
            Ok(body)
        }
        FaultKind::TruncateStream
        | FaultKind::CutStream
        | FaultKind::MalformedChunk
        | FaultKind::DuplicateChunk
        | FaultKind::ErrorEvent => Err(ApiError::Http {
            status: 400,
            message: format!(
                "fault {} only applies to streamed requests (\"stream\": true)",
                fault.kind
            ),
        }),
        _ => Ok(body),
    }
}

struct State<S> {
    inner: std::pin::Pin<Box<S>>,
    fault: Fault,
    format: Format,
    /// Data events passed on so far.
    sent: u64,
    queued: Vec<Result<Bytes, std::io::Error>>,
    over: bool,
}

fn broken() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "stream cut by the `cut-stream` fault",
    )
}

/// The events of `inner` under a stream or body fault, written in `format`. Faults that act elsewhere pass
/// the events on unchanged.
pub fn apply<S>(
    inner: S,
    fault: Fault,
    format: Format,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    let state = State {
        inner: Box::pin(inner),
        fault,
        format,
        sent: 0,
        queued: Vec::new(),
        over: false,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        if let Some(item) = st.queued.pop() {
            if item.is_err() {
                // Let the server flush what it has before the connection breaks.
                tokio::task::yield_now().await;
            }
            return Some((item, st));
        }
        if st.over {
            return None;
        }
        let Some(Ok(event)) = st.inner.next().await else {
            return None;
        };
        let is_done = &event[..] == DONE_EVENT;
        let f = &st.fault;
        if f.kind == FaultKind::Stall {
            tokio::time::sleep(Duration::from_millis(f.u64("ms", 0))).await;
        }
        if is_done {
            return Some((Ok(event), st));
        }
        let n = st.sent;
        st.sent += 1;
        let out = match f.kind {
            kind if is_body_fault(kind) => {
                let json = &event[b"data: ".len()..event.len() - 2];
                if json.starts_with(br#"{"error""#) {
                    event
                } else {
                    sse_event(&(st.format.mutate)(f, json))
                }
            }
            FaultKind::TruncatedBody => {
                st.over = true;
                st.queued.push(Err(broken()));
                event.slice(..event.len() / 2)
            }
            FaultKind::TruncateStream | FaultKind::CutStream | FaultKind::ErrorEvent
                if n >= f.u64("after", 1) =>
            {
                st.over = true;
                match f.kind {
                    FaultKind::TruncateStream => return None,
                    FaultKind::CutStream => {
                        // Let the server flush what it has before the connection breaks.
                        tokio::task::yield_now().await;
                        return Some((Err(broken()), st));
                    }
                    _ => {
                        let message = f
                            .str("message")
                            .unwrap_or("Internal server error (injected mid-stream).");
                        st.queued.push(Ok(Bytes::from_static(DONE_EVENT)));
                        (st.format.error_event)(message).into()
                    }
                }
            }
            FaultKind::MalformedChunk if n == f.u64("at", 0) => {
                let json = &event[b"data: ".len()..event.len() - 2];
                let mut broken_json = json[..json.len() / 2].to_vec();
                broken_json.extend_from_slice(b"\"}");
                sse_event(&broken_json)
            }
            FaultKind::DuplicateChunk if n == f.u64("at", 0) => {
                st.queued.push(Ok(event.clone()));
                event
            }
            _ => event,
        };
        // An error event is framed here; everything else already is.
        let out = if out.starts_with(b"data: ") {
            out
        } else {
            sse_event(&out)
        };
        Some((Ok(out), st))
    })
}
