//! Encoding of `/generate` responses and stream chunks in SGLang's `meta_info` insertion order. Item objects and
//! the logprob triples `[logprob, token_id, text|null]` are written by hand straight from the engine's slices;
//! nested values (finish reasons, top-logprob lists, escaped strings) go through serde_json.
//!
//! - `item`: one item object ([`encode_item`]), built from the JSON pieces of `json`;
//! - `aborts`: the objects of requests aborted before they ran;
//! - `body`: whole non-stream bodies from a finished [`Run`](crate::engine::Run);
//! - `stream`: the events due after each tick of a streamed run;
//! - `sse`: event framing, `[DONE]`, and when a chunk is due.

mod aborts;
mod body;
mod item;
mod json;
mod sse;
mod stream;

pub use aborts::{WaitingAbort, encode_before_prefill, encode_waiting_abort};
pub use body::{encode_body, join_body, waiting_abort_objects};
pub use item::{
    Chunk, EncodeCtx, Finished, OutputMode, Sent, encode_aborted, encode_item,
    has_non_finite_logprob,
};
pub use json::Abort;
pub use sse::{DONE_EVENT, chunk_due, error_stream_body, sse_event, stream_mode};
pub use stream::StreamEncoder;
