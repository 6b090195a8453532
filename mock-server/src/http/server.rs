//! Starting a server: [`Server::start`] binds the configured address, serves on it in a task, and hands back
//! the bound address and the handle that stops it. Every caller (the binary, the tests, the rollout command's
//! embedded mock, the examples) starts a mock this way.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::conn;
use super::routes::router;
use super::state::AppState;
use mock_core::oracle::Oracle;
use mock_core::{ServerConfig, StateError};

/// A running server. Dropping it begins a graceful shutdown; [`Server::shutdown`] also waits for it.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    state: AppState,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

/// Why [`Server::start`] could not start a server.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the server configuration is not valid")]
    Config(#[from] StateError),
    #[error("cannot bind {host}:{port}")]
    Bind {
        host: String,
        port: u16,
        #[source]
        source: io::Error,
    },
}

impl Server {
    /// Binds `config.host:config.port` (port 0 picks a free port), then serves `config` in a spawned task.
    ///
    /// The port the server reports (`/server_info`) is the bound one. Returns once the listener is bound, so a
    /// client may connect as soon as this returns.
    pub async fn start(mut config: ServerConfig) -> Result<Server, StartError> {
        // The model is built before binding, so a bad configuration never holds a port.
        let model = std::sync::Arc::new(config.build_model()?);
        let bind_error = |config: &ServerConfig, source| StartError::Bind {
            host: config.host.clone(),
            port: config.port,
            source,
        };
        let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port))
            .await
            .map_err(|source| bind_error(&config, source))?;
        let addr = listener
            .local_addr()
            .map_err(|source| bind_error(&config, source))?;
        config.port = addr.port();
        let state = AppState::with_model(config, model);
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, state.clone(), async move {
            // A dropped handle stops the server too.
            let _ = stop.await;
        }));
        tracing::info!(%addr, sglang_version = %state.config().sglang_version, "sglang-mock listening");
        Ok(Server {
            addr,
            state,
            shutdown: Some(shutdown),
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, the base URL clients use.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// An oracle with this server's configuration, sharing its model.
    pub fn oracle(&self) -> Oracle {
        self.state.oracle()
    }

    /// The server's shared state (its configuration, control plane, fault counters).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Stops accepting connections, lets in-flight requests finish, and returns the server's result.
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.join().await
    }

    /// Serves until `signal` resolves, then shuts down as [`Server::shutdown`]; returns early with the error
    /// if the server fails first.
    pub async fn run_until(mut self, signal: impl Future<Output = ()>) -> io::Result<()> {
        let Some(mut task) = self.task.take() else {
            return Ok(());
        };
        tokio::select! {
            () = signal => {
                self.task = Some(task);
                self.shutdown().await
            }
            joined = &mut task => flatten(joined),
        }
    }

    async fn join(&mut self) -> io::Result<()> {
        match self.task.take() {
            Some(task) => flatten(task.await),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

fn flatten(joined: Result<io::Result<()>, tokio::task::JoinError>) -> io::Result<()> {
    joined.unwrap_or_else(|err| Err(io::Error::other(err)))
}

/// Serves `state` on `listener` until `shutdown` resolves, then finishes in-flight requests.
async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let on_shutdown = state.clone();
    let shutdown = async move {
        shutdown.await;
        on_shutdown.begin_shutdown();
    };
    // The listener wrapper lets the `reset` fault close a connection with a TCP RST before any byte.
    axum::serve(
        conn::ResettableListener::new(listener),
        router(state).into_make_service_with_connect_info::<conn::ConnHandle>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
