//! `sglang-mock record`: a proxy in front of any SGLang (or router) URL that stores every exchange it passes on
//! in a [`Recording`](super::recording::Recording) file, exactly: the request as sent, the response's status,
//! headers and bytes, a stream's chunks with the time each arrived. Clients see the upstream's answer as it
//! comes, chunk by chunk; a client that goes away mid-stream leaves an exchange marked incomplete.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::Value;

use super::listen::{Listening, client, read_request};
use super::recording::{
    Bytes, Chunk, Exchange, FORMAT, Header, RecordedRequest, RecordedResponse, kept_headers,
    write_line,
};

/// Where to listen, what to record, and where to write it.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// The base URL of the server the exchanges go to, such as `http://127.0.0.1:30000`.
    pub upstream: String,
    /// The recording file; created, or replaced if it exists.
    pub out: PathBuf,
    pub host: String,
    /// 0 picks a free port.
    pub port: u16,
}

/// Why a recorder could not start.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("the upstream {0:?} is not an http:// URL")]
    Upstream(String),
    #[error("cannot write the recording {path}")]
    Out {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Bind(std::io::Error),
}

/// A running recorder. [`Recorder::finish`] stops it and says how many exchanges it wrote.
#[derive(Debug)]
pub struct Recorder {
    listening: Listening,
    shared: Arc<Shared>,
    /// The upstream's server info when the recording started (the header's).
    server_info: Option<Value>,
}

#[derive(Debug)]
struct Shared {
    upstream: String,
    client: reqwest::Client,
    out: Mutex<std::io::BufWriter<std::fs::File>>,
    path: PathBuf,
    started: Instant,
    next_seq: AtomicU64,
    written: AtomicU64,
}

impl Recorder {
    /// Reads the upstream's server info for the header (a router without one gets a header without it),
    /// creates the file with its header line, then listens.
    pub async fn start(options: RecordOptions) -> Result<Recorder, RecordError> {
        let upstream = options.upstream.trim_end_matches('/').to_owned();
        if !upstream.starts_with("http://") {
            return Err(RecordError::Upstream(options.upstream));
        }
        let client = client(None);
        let server_info = server_info(&client, &upstream).await;
        let header = Header {
            sglang_mock_recording: FORMAT,
            upstream: upstream.clone(),
            release: server_info.as_ref().and_then(release_in),
            server_info,
            recorded_by: format!("sglang-mock {}", env!("CARGO_PKG_VERSION")),
        };
        let out_error = |source| RecordError::Out {
            path: options.out.display().to_string(),
            source,
        };
        let file = std::fs::File::create(&options.out).map_err(out_error)?;
        let mut out = std::io::BufWriter::new(file);
        write_line(&mut out, &header)
            .and_then(|()| out.flush())
            .map_err(out_error)?;
        let server_info = header.server_info.clone();
        let shared = Arc::new(Shared {
            upstream,
            client,
            out: Mutex::new(out),
            path: options.out.clone(),
            started: Instant::now(),
            next_seq: AtomicU64::new(0),
            written: AtomicU64::new(0),
        });
        let router = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        let listening = Listening::bind(&options.host, options.port, router)
            .await
            .map_err(RecordError::Bind)?;
        tracing::info!(addr = %listening.addr(), upstream = %shared.upstream, out = %options.out.display(), "recording");
        Ok(Recorder {
            listening,
            shared,
            server_info,
        })
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.listening.addr()
    }

    /// `http://<addr>`: where clients send what is to be recorded.
    pub fn url(&self) -> String {
        self.listening.url()
    }

    /// The release the upstream reported when the recording started, if it reported one.
    pub fn release(&self) -> Option<String> {
        self.server_info.as_ref().and_then(release_in)
    }

    /// The upstream's server info when the recording started, if it answered one.
    pub fn server_info(&self) -> Option<&Value> {
        self.server_info.as_ref()
    }

    /// The recording file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Stops listening, waits for the exchanges in flight, and returns how many exchanges the file holds.
    pub async fn finish(self) -> std::io::Result<u64> {
        self.listening.stop().await?;
        Ok(self.shared.written.load(Ordering::SeqCst))
    }

    /// Records until `signal` resolves, then finishes as [`Recorder::finish`].
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> std::io::Result<u64> {
        signal.await;
        self.finish().await
    }
}

/// The release a server info names (its `version`).
pub(crate) fn release_in(info: &Value) -> Option<String> {
    info.get("version")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The upstream's server info: `/server_info`, or `/get_server_info` where a release has only that.
pub(crate) async fn server_info(client: &reqwest::Client, upstream: &str) -> Option<Value> {
    for path in ["/server_info", "/get_server_info"] {
        let answer = client
            .get(format!("{upstream}{path}"))
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        match answer {
            Ok(response) if response.status().is_success() => {
                let bytes = response.bytes().await.ok()?;
                return serde_json::from_slice(&bytes).ok();
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(%err, upstream, "cannot read the upstream's server info");
                return None;
            }
        }
    }
    None
}

/// One exchange on its way: written to the file when dropped, which is when its body ended, failed, or the
/// client went away.
struct Pending {
    shared: Arc<Shared>,
    exchange: Option<Exchange>,
    arrived: Instant,
}

impl Pending {
    fn push(&mut self, bytes: &[u8]) {
        let ms = millis(self.arrived.elapsed());
        if let Some(exchange) = &mut self.exchange {
            exchange.response.chunks.push(Chunk {
                ms,
                data: Bytes(bytes.to_vec()),
            });
        }
    }

    fn complete(&mut self) {
        if let Some(exchange) = &mut self.exchange {
            exchange.response.complete = true;
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(exchange) = self.exchange.take() else {
            return;
        };
        let mut out = match self.shared.out.lock() {
            Ok(out) => out,
            Err(poisoned) => poisoned.into_inner(),
        };
        match write_line(&mut *out, &exchange).and_then(|()| out.flush()) {
            Ok(()) => {
                self.shared.written.fetch_add(1, Ordering::SeqCst);
            }
            Err(err) => tracing::error!(%err, seq = exchange.seq, "cannot write an exchange"),
        }
    }
}

fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// The proxy's one handler: pass the request on, pass the answer back, record both.
async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let arrived = Instant::now();
    let seq = shared.next_seq.fetch_add(1, Ordering::SeqCst);
    let at_ms = millis(arrived.duration_since(shared.started));
    let (parts, path, body) = match read_request(request).await {
        Ok(read) => read,
        Err(err) => return proxy_error(502, &format!("cannot read the request body: {err}")),
    };
    let recorded_request = RecordedRequest {
        method: parts.method.to_string(),
        path: path.clone(),
        headers: kept_headers(
            parts
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_bytes())),
            true,
        ),
        body: Bytes(body.to_vec()),
    };
    let mut upstream = shared
        .client
        .request(parts.method.clone(), format!("{}{path}", shared.upstream))
        .body(body);
    for (name, value) in &parts.headers {
        // The client writes its own host and framing headers; credentials go upstream as sent.
        if !matches!(
            name.as_str(),
            "host" | "content-length" | "connection" | "transfer-encoding"
        ) {
            upstream = upstream.header(name, value);
        }
    }
    let mut pending = Pending {
        shared: shared.clone(),
        exchange: None,
        arrived,
    };
    let answer = match upstream.send().await {
        Ok(answer) => answer,
        Err(err) => {
            let message = format!("the upstream {} gave no answer: {err}", shared.upstream);
            let response = proxy_error(502, &message);
            pending.exchange = Some(Exchange {
                seq,
                at_ms,
                request: recorded_request,
                response: RecordedResponse {
                    status: 502,
                    headers: vec![],
                    chunks: vec![],
                    complete: false,
                    upstream_error: Some(message),
                },
            });
            return response;
        }
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    pending.exchange = Some(Exchange {
        seq,
        at_ms,
        request: recorded_request,
        response: RecordedResponse {
            status: status.as_u16(),
            headers: kept_headers(
                headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())),
                false,
            ),
            chunks: vec![],
            complete: false,
            upstream_error: None,
        },
    });
    let streamed = headers
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let body = if streamed {
        // Chunk by chunk, each recorded as it passes.
        let chunks = futures_util::stream::unfold(
            (answer.bytes_stream(), pending),
            |(mut upstream, mut pending)| async move {
                match upstream.next().await {
                    Some(Ok(bytes)) => {
                        pending.push(&bytes);
                        Some((Ok(bytes), (upstream, pending)))
                    }
                    Some(Err(err)) => {
                        tracing::warn!(%err, "the upstream broke the stream");
                        Some((Err(std::io::Error::other(err)), (upstream, pending)))
                    }
                    None => {
                        pending.complete();
                        None
                    }
                }
            },
        )
        // After an error the stream ends: the pending exchange is written as incomplete.
        .scan(
            false,
            |failed, item: Result<bytes::Bytes, std::io::Error>| {
                let stop = *failed;
                *failed |= item.is_err();
                std::future::ready((!stop).then_some(item))
            },
        );
        Body::from_stream(chunks)
    } else {
        match answer.bytes().await {
            Ok(bytes) => {
                pending.push(&bytes);
                pending.complete();
                Body::from(bytes)
            }
            Err(err) => {
                tracing::warn!(%err, "the upstream broke the answer");
                Body::from_stream(futures_util::stream::once(async move {
                    Err::<bytes::Bytes, _>(std::io::Error::other(err))
                }))
            }
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    for (name, value) in &headers {
        if !matches!(
            name.as_str(),
            "content-length" | "connection" | "transfer-encoding" | "date"
        ) {
            response.headers_mut().append(name, value.clone());
        }
    }
    response
}

/// An answer of the proxy itself (the upstream gave none), never confused with SGLang's: it says who answered.
fn proxy_error(status: u16, message: &str) -> Response {
    let body =
        serde_json::json!({"error": {"message": message, "type": "SglangMockRecorderError"}});
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() =
        axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::BAD_GATEWAY);
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    response
}
