//! A tiny scripted HTTP/1.1 server for client tests: bind 127.0.0.1:0, answer each request with a canned reply.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

/// What to do with one request.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// A complete response with Content-Length.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// A chunked response, one HTTP chunk per part; `complete: false` drops the connection
    /// before the terminating chunk, as a crashed server or a cut network would.
    Chunked { parts: Vec<Vec<u8>>, complete: bool },
    /// Close the connection without answering.
    Drop,
    /// Never answer (keeps the connection open).
    Hang,
    /// Wait, then reply.
    After(Duration, Box<Reply>),
}

impl Reply {
    pub(crate) fn json(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply::Full {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    pub(crate) fn with_header(self, k: &str, v: &str) -> Reply {
        match self {
            Reply::Full {
                status,
                mut headers,
                body,
            } => {
                headers.push((k.into(), v.into()));
                Reply::Full {
                    status,
                    headers,
                    body,
                }
            }
            other => other,
        }
    }

    /// An SSE body split into parts of `size` bytes, so frames straddle chunk boundaries.
    pub(crate) fn sse(body: &[u8], size: usize, complete: bool) -> Reply {
        Reply::Chunked {
            parts: body.chunks(size.max(1)).map(<[u8]>::to_vec).collect(),
            complete,
        }
    }
}

type Handler = dyn Fn(usize, &Recorded) -> Reply + Send + Sync;

/// A running scripted server; it stops when the test's runtime ends.
#[derive(Clone)]
pub(crate) struct Server {
    pub url: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    in_flight: Arc<AtomicUsize>,
    pub max_in_flight: Arc<AtomicUsize>,
}

impl Server {
    /// Starts a server whose handler gets the 0-based request number and the request.
    pub(crate) async fn start(
        handler: impl Fn(usize, &Recorded) -> Reply + Send + Sync + 'static,
    ) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let server = Server {
            url,
            requests: Arc::default(),
            in_flight: Arc::default(),
            max_in_flight: Arc::default(),
        };
        let handler: Arc<Handler> = Arc::new(handler);
        let s = server.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve_conn(conn, s.clone(), handler.clone()));
            }
        });
        server
    }

    pub(crate) fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    pub(crate) fn request(&self, i: usize) -> Recorded {
        self.requests.lock().unwrap()[i].clone()
    }
}

async fn serve_conn(mut conn: TcpStream, server: Server, handler: Arc<Handler>) {
    let mut buf = Vec::new();
    loop {
        let Some(req) = read_request(&mut conn, &mut buf).await else {
            return;
        };
        let n = {
            let mut reqs = server.requests.lock().unwrap();
            reqs.push(req.clone());
            reqs.len() - 1
        };
        let now = server.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        server.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let reply = handler(n, &req);
        let keep = write_reply(&mut conn, reply).await;
        server.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !keep {
            return;
        }
    }
}

async fn read_request(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Recorded> {
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let mut tmp = [0u8; 4096];
        let n = conn.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let start = head_end + 4;
    while buf.len() < start + len {
        let mut tmp = [0u8; 4096];
        let n = conn.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = buf[start..start + len].to_vec();
    buf.drain(..start + len);
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// Writes the reply; returns whether the connection stays open.
async fn write_reply(conn: &mut TcpStream, reply: Reply) -> bool {
    match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status));
            for (k, v) in headers {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
            out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
            let mut bytes = out.into_bytes();
            bytes.extend_from_slice(&body);
            conn.write_all(&bytes).await.is_ok()
        }
        Reply::Chunked { parts, complete } => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            if conn.write_all(head.as_bytes()).await.is_err() {
                return false;
            }
            for p in parts {
                let mut c = format!("{:x}\r\n", p.len()).into_bytes();
                c.extend_from_slice(&p);
                c.extend_from_slice(b"\r\n");
                if conn.write_all(&c).await.is_err() || conn.flush().await.is_err() {
                    return false;
                }
                // Let the client see each part separately.
                tokio::task::yield_now().await;
            }
            if complete {
                conn.write_all(b"0\r\n\r\n").await.is_ok()
            } else {
                let _ = conn.shutdown().await;
                false
            }
        }
        Reply::Drop => false,
        Reply::Hang => {
            std::future::pending::<()>().await;
            false
        }
        Reply::After(d, r) => {
            tokio::time::sleep(d).await;
            Box::pin(write_reply(conn, *r)).await
        }
    }
}
