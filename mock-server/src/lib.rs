//! `sglang-mock`: a deterministic SGLang server emulator whose logprobs are the true probabilities of a toy model.
//!
//! [`app`] builds the axum router (for in-process tests with `tower::ServiceExt::oneshot`); [`run`] serves it
//! on a listener the caller bound. [`oracle::Oracle`] computes what the server must answer.
//!
//! The layers, each importing only the ones before it: [`model`] (the toy model, pure), [`engine`] (one
//! sample's generation, the plan, the step core), [`request`] (a body into a plan), [`wire`] (SGLang's
//! bytes), [`oracle`]; then [`faults`] (a catalogue of HTTP, body, stream and abort faults, scheduled
//! deterministically or forced per request), [`control`] (SGLang's RL control plane: aborts, pause and
//! continue, weight versions, the queue), [`latency`], and [`http`] (the router, handlers, drivers, metrics).
//! [`script`] answers chosen text with true logprobs. Everything is configured through [`ServerConfig`] and
//! off by default.

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

use std::future::Future;
use std::io;

pub use config::StateError;
pub use config::{
    Fault, FaultConfig, FaultKind, FaultRule, LatencyConfig, Profile, ScriptFinish, ScriptRule,
    ServerConfig, StreamFilter,
};
pub use error::ApiError;
pub use http::AppState;
pub use oracle::Oracle;

/// The router with every endpoint, sharing `state`.
pub fn app(state: AppState) -> axum::Router {
    http::router(state)
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
        http::conn::ResettableListener::new(listener),
        app(state).into_make_service_with_connect_info::<http::conn::ConnHandle>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
