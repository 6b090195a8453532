//! The core of `sglang-mock`: everything that decides what an SGLang server answers, with no HTTP, no async
//! runtime and no clock of its own.
//!
//! [`release`] holds the SGLang releases as data; [`model`] the toy model (and, with the `hf` feature, a loaded
//! Hugging Face tokenizer and its chat template); [`engine`] one sample's generation, the plan and the step
//! core; [`request`] turns a `/generate` body into a plan; [`wire`] writes SGLang's bytes; [`oracle`] says
//! exactly what a server must answer; [`witness`] keeps the ledger of what was served and audits samples
//! against it. The configuration ([`ServerConfig`], with the fault catalogue of [`faults`], the latency model
//! [`LatencyConfig`] and the scripted answers of [`ScriptRule`]s) is shared with the server crate,
//! `mock-server`, which adds HTTP, the control plane and time, and answers a [`RequestError`] with SGLang's
//! status and body.

mod config;
pub mod engine;
mod error;
pub mod faults;
mod latency;
pub mod model;
pub mod oracle;
mod pyfmt;
pub mod release;
pub mod request;
mod script;
pub mod wire;
pub mod witness;

pub use config::{ServerConfig, StateError};
pub use error::{RequestError, ValidationErrors};
pub use latency::{Clock, LatencyConfig, LatencyProfile};
pub use model::MoeShape;
pub use release::{Release, SglangVersion, UnknownSglangVersion};
pub use script::{ScriptError, ScriptFinish, ScriptRule};
