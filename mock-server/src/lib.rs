//! `sglang-mock`: a deterministic SGLang server emulator whose logprobs are the true probabilities of a toy model.
//!
//! [`Server::start`] binds and serves a configuration and hands back its address and shutdown handle; [`app`]
//! builds the axum router alone (for in-process tests with `tower::ServiceExt::oneshot`). [`oracle::Oracle`] computes what the server must answer.
//!
//! The layers, each importing only the ones before it: [`model`] (the toy model, pure), [`engine`] (one
//! sample's generation, the plan, the step core), [`request`] (a body into a plan), [`wire`] (SGLang's
//! bytes), [`oracle`]; then [`faults`] (a catalogue of HTTP, body, stream and abort faults, scheduled
//! deterministically or forced per request), [`control`] (SGLang's RL control plane: aborts, pause and
//! continue, weight versions, the queue), [`latency`], and [`http`] (the router, handlers, drivers, metrics).
//! [`script`] answers chosen text with true logprobs. Everything is configured through [`ServerConfig`] and
//! off by default.

#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod control;
pub mod engine;
pub mod error;
pub mod faults;
pub mod http;
pub mod latency;
pub mod model;
pub mod oracle;
pub mod pyfmt;
pub mod request;
pub mod script;
pub mod wire;

pub use config::StateError;
pub use config::{
    Fault, FaultConfig, FaultKind, FaultRule, LatencyConfig, Profile, ScriptFinish, ScriptRule,
    ServerConfig, StreamFilter,
};
pub use error::ApiError;
pub use http::{AppState, Server, StartError};
pub use oracle::Oracle;

/// The router with every endpoint, sharing `state`.
pub fn app(state: AppState) -> axum::Router {
    http::router(state)
}
