//! Faults applied to what a generating route answers: a finished non-stream body, or the events of a stream.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use super::mutate::mutate_body;
use super::{BodyFault, Fault, StreamFault};
use crate::error::ApiError;
use mock_core::release::SglangVersion;
use mock_core::wire::{self, DONE_EVENT, sse_event};

/// Rewrites a body, or one stream event's JSON, under a body fault.
pub(crate) type Mutate = fn(&BodyFault, &[u8]) -> Vec<u8>;

/// How a route writes its answers, for the faults that rewrite them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Format {
    /// A body or one stream event (JSON) under a body fault; `None` for a route that applies body faults to
    /// its typed answer before writing it, and so never hands one here.
    pub mutate: Option<Mutate>,
    /// The JSON of the event that `error-event` sends, from its message, in the release's shape.
    pub error_event: fn(&str, SglangVersion) -> Vec<u8>,
}

/// `/generate`'s answers: body faults splice SGLang's objects; the error event is the release's, as SGLang's
/// `stream_results` writes a `ValueError` ([`wire::error_event`]).
pub(crate) const NATIVE: Format = Format {
    mutate: Some(mutate_body),
    error_event: wire::error_event,
};

/// The non-stream body under `fault`: mutated, cut, or sent after a stall. A stream-only fault on a
/// non-stream request is a 400 that says so. HTTP and engine faults acted earlier and leave the body alone.
pub(crate) async fn non_stream_body(
    fault: &Fault,
    body: Vec<u8>,
    format: Format,
) -> Result<Vec<u8>, ApiError> {
    match fault {
        Fault::Body(fault) => Ok(match format.mutate {
            Some(mutate) => mutate(fault, &body),
            None => body,
        }),
        Fault::Http(_) | Fault::Engine(_) => Ok(body),
        Fault::Stream(stream) => match stream {
            StreamFault::TruncatedBody { keep } => {
                let keep = keep.unwrap_or(body.len() as u64 / 2) as usize;
                Ok(body[..keep.min(body.len().saturating_sub(1))].to_vec())
            }
            StreamFault::Stall { ms } => {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                Ok(body)
            }
            StreamFault::TruncateStream { .. }
            | StreamFault::CutStream { .. }
            | StreamFault::MalformedChunk { .. }
            | StreamFault::DuplicateChunk { .. }
            | StreamFault::ErrorEvent { .. } => Err(ApiError::Http {
                status: 400,
                message: format!(
                    "fault {} only applies to streamed requests (\"stream\": true)",
                    fault.kind()
                ),
            }),
        },
    }
}

/// A fault that acts on the events of a stream: body faults rewrite each chunk, stream faults cut, break,
/// repeat, corrupt or delay them.
#[derive(Debug, Clone)]
pub(crate) enum EventFault {
    Body(BodyFault),
    Stream(StreamFault),
}

impl EventFault {
    /// The part of `fault` that acts on a stream's events; HTTP and engine faults act elsewhere.
    pub(crate) fn of(fault: Fault) -> Option<EventFault> {
        match fault {
            Fault::Body(fault) => Some(EventFault::Body(fault)),
            Fault::Stream(fault) => Some(EventFault::Stream(fault)),
            Fault::Http(_) | Fault::Engine(_) => None,
        }
    }
}

struct State<S> {
    inner: std::pin::Pin<Box<S>>,
    fault: EventFault,
    format: Format,
    version: SglangVersion,
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

/// The events of `inner` under a stream or body fault, written in `format`.
pub(crate) fn apply<S>(
    inner: S,
    fault: EventFault,
    format: Format,
    version: SglangVersion,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    let state = State {
        inner: Box::pin(inner),
        fault,
        format,
        version,
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
        if let EventFault::Stream(StreamFault::Stall { ms }) = &st.fault {
            tokio::time::sleep(Duration::from_millis(*ms)).await;
        }
        if is_done {
            return Some((Ok(event), st));
        }
        let n = st.sent;
        st.sent += 1;
        let out = match &st.fault {
            EventFault::Body(fault) => {
                let json = &event[b"data: ".len()..event.len() - 2];
                match st.format.mutate {
                    Some(mutate) if !json.starts_with(br#"{"error""#) => {
                        sse_event(&mutate(fault, json))
                    }
                    _ => event,
                }
            }
            EventFault::Stream(fault) => match fault {
                StreamFault::TruncatedBody { .. } => {
                    st.over = true;
                    st.queued.push(Err(broken()));
                    event.slice(..event.len() / 2)
                }
                // The stream ends here, cleanly and without `[DONE]`.
                StreamFault::TruncateStream { after } if n >= *after => return None,
                StreamFault::CutStream { after } if n >= *after => {
                    st.over = true;
                    // Let the server flush what it has before the connection breaks.
                    tokio::task::yield_now().await;
                    return Some((Err(broken()), st));
                }
                StreamFault::ErrorEvent { after, message } if n >= *after => {
                    st.over = true;
                    let message = message
                        .as_deref()
                        .unwrap_or("Internal server error (injected mid-stream).");
                    let error = (st.format.error_event)(message, st.version);
                    st.queued.push(Ok(Bytes::from_static(DONE_EVENT)));
                    error.into()
                }
                StreamFault::MalformedChunk { at } if n == *at => {
                    let json = &event[b"data: ".len()..event.len() - 2];
                    let mut broken_json = json[..json.len() / 2].to_vec();
                    broken_json.extend_from_slice(b"\"}");
                    sse_event(&broken_json)
                }
                StreamFault::DuplicateChunk { at } if n == *at => {
                    st.queued.push(Ok(event.clone()));
                    event
                }
                // Before its chunk, or a stall (which acted above): the event passes unchanged.
                StreamFault::TruncateStream { .. }
                | StreamFault::CutStream { .. }
                | StreamFault::ErrorEvent { .. }
                | StreamFault::MalformedChunk { .. }
                | StreamFault::DuplicateChunk { .. }
                | StreamFault::Stall { .. } => event,
            },
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
