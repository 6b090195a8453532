//! `sglang-mock`: a deterministic SGLang server emulator whose logprobs are the true probabilities of a toy model.
//!
//! [`Server::start`] binds and serves a [`ServerConfig`] and hands back its address and shutdown handle;
//! [`app`] builds the axum router alone (for in-process tests with `tower::ServiceExt::oneshot`);
//! [`oracle::Oracle`] computes what the server must answer. Everything is configured through [`ServerConfig`]
//! (with [`FaultConfig`], [`LatencyConfig`] and [`ScriptRule`]s) and off by default.
//!
//! The supported surface is what this page lists: the items re-exported here, and the public modules of the
//! core crate, `mock_core`, re-exported under the same names: [`release`] (the SGLang releases as data),
//! [`model`] (the toy model), [`engine`] (one sample's generation, the plan, the step core), [`request`] (a body
//! into a plan), [`wire`] (SGLang's bytes), [`oracle`] and [`witness`] (the ledger of what was served and the
//! audit of samples against it), each item under one path. This crate adds what needs HTTP or time, and keeps
//! it private: the application of faults, the control plane (aborts, pauses, the queue, weight versions) and
//! the HTTP layer, which answers the core's [`RequestError`] as an [`ApiError`] in SGLang's shape.

mod batch;
#[cfg(feature = "cli")]
pub mod cli;
mod control;
mod error;
mod faults;
mod http;
#[cfg(feature = "judge")]
pub mod judge;

// The core's layers, under the paths this crate has always given them.
pub use mock_core::{engine, model, oracle, release, request, wire, witness};

pub use error::ApiError;
pub use faults::{
    BodyFault, Channel, EngineFault, FAULT_HEADER, Fault, FaultClass, FaultConfig,
    FaultConfigError, FaultError, FaultKind, FaultRule, HttpFault, NonFinite, NumberLiteral,
    StreamFault, StreamFilter,
};
pub use http::{AppState, Server, StartError};
pub use mock_core::{
    Clock, LatencyConfig, MoeShape, Release, RequestError, ScriptError, ScriptFinish, ScriptRule,
    ServerConfig, SglangVersion, StateError, UnknownSglangVersion,
};

/// The router with every endpoint, sharing `state`.
pub fn app(state: AppState) -> axum::Router {
    http::router(state)
}
