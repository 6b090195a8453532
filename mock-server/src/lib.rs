//! `sglang-mock`: a deterministic SGLang server emulator whose logprobs are the true probabilities of a toy model.
//!
//! [`app`] builds the axum router (for in-process tests with `tower::ServiceExt::oneshot`); [`run`] serves it
//! on a listener the caller bound. [`oracle::Oracle`] computes what the server must answer.
//!
//! Beyond answering perfectly, the server can misbehave on purpose ([`fault`]: a catalogue of HTTP, body,
//! stream and abort faults, scheduled deterministically or forced per request), take its time ([`latency`]),
//! queue requests and act on SGLang's RL control plane ([`control`], [`admin`]: aborts, pause and continue,
//! weight versions), answer chosen text with true logprobs ([`script`]), and export Prometheus metrics
//! ([`metrics`]). Everything is configured through [`ServerConfig`] and off by default.

pub mod admin;
pub mod config;
pub mod conn;
pub mod control;
pub mod engine;
pub mod error;
pub mod fault;
pub mod generate;
pub mod latency;
pub mod metrics;
pub mod model;
pub mod openai;
pub mod oracle;
pub mod pyfmt;
pub mod request;
pub mod routes;
pub mod script;
pub mod wire;

use std::future::Future;
use std::io;

pub use config::{
    Fault, FaultConfig, FaultKind, FaultRule, LatencyConfig, Profile, ScriptFinish, ScriptRule,
    ServerConfig, StreamFilter,
};
pub use error::ApiError;
pub use oracle::Oracle;
pub use routes::{AppState, StateError};

/// The router with every endpoint, sharing `state`.
pub fn app(state: AppState) -> axum::Router {
    routes::router(state)
}

/// Serve `config` on an already bound listener until `shutdown` resolves, then finish in-flight requests.
pub async fn run(
    listener: tokio::net::TcpListener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let state =
        AppState::new(config).map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, profile = %state.config().profile, "sglang-mock listening");
    let on_shutdown = state.clone();
    let shutdown = async move {
        shutdown.await;
        on_shutdown.begin_shutdown();
    };
    // The listener wrapper lets the `reset` fault close a connection with a TCP RST before any byte.
    axum::serve(
        conn::ResettableListener::new(listener),
        app(state).into_make_service_with_connect_info::<conn::ConnHandle>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
