//! Real SGLang as the judge (the `judge` feature): record a session with any SGLang, replay it without one,
//! and check the mock against a release, live or recorded.
//!
//! - `recording`: the file format (JSON lines: a header, then one exchange a line, bytes exact);
//! - `record`: [`Recorder`], a proxy that writes what passes through it;
//! - `replay`: [`Replay`], a server that answers from a recording, matched on the canonical request;
//! - `corpus`: [`Corpus`], the requests `conform` sends, with the built-in one;
//! - `compare`: what must agree between two answers ([`compare`](compare::compare)) and what may not;
//! - `conform`: [`conform`](conform::conform), the corpus against a target and the mock, and its [`Report`];
//! - `listen`: the listener and HTTP client the others share.
//!
//! The commands on top are `sglang-mock record`, `replay` and `conform` (`cli`).

pub mod compare;
pub mod conform;
pub mod corpus;
mod listen;
pub mod record;
pub mod recording;
pub mod replay;

pub use conform::{ConformOptions, Known, Report, Target};
pub use corpus::Corpus;
pub use record::{RecordOptions, Recorder};
pub use recording::Recording;
pub use replay::{Replay, ReplayOptions, ReplayReport};
