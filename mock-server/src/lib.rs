//! `sglang-mock`: a deterministic SGLang server emulator whose logprobs are the true probabilities of a toy model.
//!
//! [`Server::start`] binds and serves a [`ServerConfig`] and hands back its address and shutdown handle;
//! [`app`] builds the axum router alone (for in-process tests with `tower::ServiceExt::oneshot`);
//! [`oracle::Oracle`] computes what the server must answer. Everything is configured through [`ServerConfig`]
//! (with [`FaultConfig`], [`LatencyConfig`] and [`ScriptRule`]s) and off by default.
//!
//! The supported surface is what this page lists: the items re-exported here, and the public modules
//! [`release`] (the SGLang releases as data), [`model`] (the toy model), [`engine`] (one sample's generation,
//! the plan, the step core), [`request`] (a body into a plan), [`wire`] (SGLang's bytes), [`oracle`] and
//! [`witness`] (the ledger of what was served and the audit of samples against it), each item under one path.
//! The rest is private: the fault schedule and its application, the control plane (aborts, pauses, the queue,
//! weight versions), the latency model and the HTTP layer.

#[cfg(feature = "cli")]
pub mod cli;
mod config;
mod control;
pub mod engine;
mod error;
mod faults;
mod http;
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
pub use error::ApiError;
pub use faults::{
    BodyFault, Channel, EngineFault, FAULT_HEADER, Fault, FaultClass, FaultConfig,
    FaultConfigError, FaultError, FaultKind, FaultRule, HttpFault, NonFinite, NumberLiteral,
    StreamFault, StreamFilter,
};
pub use http::{AppState, Server, StartError};
pub use latency::LatencyConfig;
pub use model::MoeShape;
pub use release::{Release, SglangVersion, UnknownSglangVersion};
pub use script::{ScriptError, ScriptFinish, ScriptRule};

/// The router with every endpoint, sharing `state`.
pub fn app(state: AppState) -> axum::Router {
    http::router(state)
}
