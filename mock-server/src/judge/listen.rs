//! What the recorder and the replay have in common with each other and with the server: a bound listener that
//! serves a router in a task until it is told to stop, and the HTTP client they send with.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The largest request body the recorder and the replay read (an audit batch or a long prompt is far below).
const MAX_REQUEST_BYTES: usize = 1 << 30;

/// A request as the recorder and the replay read it: its head, its path with the query, and its whole body.
pub(crate) async fn read_request(
    request: axum::extract::Request,
) -> Result<(axum::http::request::Parts, String, bytes::Bytes), axum::Error> {
    let (parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let body = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await?;
    Ok((parts, path, body))
}

/// A router served on a bound address until [`Listening::stop`] or drop.
#[derive(Debug)]
pub(crate) struct Listening {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl Listening {
    /// Binds `host:port` (0 picks a free port) and serves `router` on it.
    pub(crate) async fn bind(host: &str, port: u16, router: axum::Router) -> io::Result<Listening> {
        let listener = tokio::net::TcpListener::bind((host, port))
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("cannot bind {host}:{port}: {e}")))?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .into_future(),
        );
        Ok(Listening {
            addr,
            stop: Some(stop),
            task: Some(task),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting connections and waits for the requests in flight to finish.
    pub(crate) async fn stop(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.unwrap_or_else(|e| Err(io::Error::other(e))),
            None => Ok(()),
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The client the recorder forwards with and `conform` sends with: no redirects followed, no proxy from the
/// environment (the targets are SGLang servers, usually on this machine), bodies passed through as sent, and
/// a new connection for every request: uvicorn closes a connection after an unhandled exception (a 500), and
/// a request sent on it would fail before the server saw it.
pub(crate) fn client(timeout: Option<Duration>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .pool_max_idle_per_host(0);
    if let Some(timeout) = timeout {
        builder = builder.read_timeout(timeout);
    }
    // The builder fails only on TLS set-up, which this build has none of.
    builder.build().unwrap_or_else(|_| reqwest::Client::new())
}
