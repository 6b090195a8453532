//! Encoding of `/generate` responses and stream chunks in SGLang's `meta_info` insertion order. Item objects and
//! the logprob triples `[logprob, token_id, text|null]` are written by hand straight from the engine's slices;
//! nested values (finish reasons, top-logprob lists, escaped strings) go through serde_json.
//!
//! - `meta`: the one writer of an item object and its `meta_info`; which keys each [`Shape`] carries, and in
//!   what order, is the data of [`keys`];
//! - `item`: a generated or refused item's object ([`encode_item`]), from the JSON pieces of `json`;
//! - `aborts`: the objects of requests aborted before they ran;
//! - `body`: whole non-stream bodies from a finished [`Run`](crate::engine::Run);
//! - `stream`: the events due after each tick of a streamed run;
//! - `sse`: event framing, `[DONE]`, and when a chunk is due;
//! - `versions`: the `weight_versions` spans of an item from the version changes it lived through.

mod aborts;
mod body;
mod item;
mod json;
mod meta;
mod sse;
mod stream;
mod versions;

pub use crate::engine::chunk_due;
pub use body::{NeverRan, check_serialisable, encode_body, join_body, never_ran_objects};
pub use item::{Chunk, EncodeCtx, Finished, OutputMode, Sent, encode_aborted, encode_item};
pub use json::{
    Abort, BEFORE_PREFILL_MESSAGE, WAITING_ABORT_MESSAGE, WaitingAbort, base64_i32,
    decode_base64_i32,
};
pub use meta::{Key, Shape, keys};
pub use sse::{DONE_EVENT, error_event, error_stream_body, sse_event, stream_mode};
pub use stream::{Due, StreamEncoder, due};
pub use versions::{VersionEvent, VersionSpan, reported_version, tile, weight_version_spans};
