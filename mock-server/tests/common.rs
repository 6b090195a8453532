//! Shared helpers: in-process and live servers, the data-driven `check` machinery, a strict byte-level SSE
//! reader, an order-preserving JSON tree and stream reassembly.

use std::net::SocketAddr;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use mock_server::oracle::Oracle;
use mock_server::{AppState, LatencyConfig, ServerConfig};
use serde_json::Value;
use tower::ServiceExt;

/// `meta_info` of a request aborted in the waiting queue (with logprobs asked), as 0.5.23's `_handle_abort_req`
/// builds it: no `prompt_tokens` and no `cached_tokens`; the spans of `_make_abort_req`; the object is the item's
/// first, so it carries `response_sent_to_client_ts`.
pub(crate) const WAITING_ABORT_META_KEYS: [&str; 10] = [
    "id",
    "finish_reason",
    "weight_version",
    "e2e_latency",
    "weight_versions",
    "input_token_logprobs",
    "output_token_logprobs",
    "output_token_logprobs_length",
    "completion_tokens",
    "response_sent_to_client_ts",
];

/// `body` with every `response_sent_to_client_ts` value written as `0`: a wall-clock field, which two runs of
/// the same request never share.
pub(crate) fn zero_sent_ts(body: &[u8]) -> Vec<u8> {
    const KEY: &[u8] = br#""response_sent_to_client_ts":"#;
    let mut out = Vec::with_capacity(body.len());
    let mut rest = body;
    while let Some(at) = rest.windows(KEY.len()).position(|w| w == KEY) {
        out.extend_from_slice(&rest[..at + KEY.len()]);
        rest = &rest[at + KEY.len()..];
        let digits = rest
            .iter()
            .take_while(|b| b.is_ascii_digit() || b"+-.eE".contains(b))
            .count();
        out.push(b'0');
        rest = &rest[digits..];
    }
    out.extend_from_slice(rest);
    out
}

/// The path of a fixture under `tests/data/`.
/// One simulated second per token, so a request stays in flight until the test moves the clock.
pub(crate) fn slow() -> ServerConfig {
    ServerConfig {
        latency: LatencyConfig {
            itl_ms: 1000.0,
            ..LatencyConfig::default()
        },
        ..ServerConfig::default()
    }
}

/// The objects of a body: the items of a batch array, or the one object.
pub(crate) fn items(body: &Value) -> Vec<Value> {
    match body {
        Value::Array(items) => items.clone(),
        item => vec![item.clone()],
    }
}

/// An object's generated ids: its `output_ids` without the prompt ids a release puts before them (0.5.3's
/// detokenizer window: the last `min(prompt_tokens, 5)`, VERSIONS.md `decode_window_ids`), which a stream's
/// first chunk carries (`first`) and a non-stream object always does.
pub(crate) fn generated_ids(
    item: &Value,
    release: mock_server::SglangVersion,
    first: bool,
) -> Vec<Value> {
    let ids = item["output_ids"].as_array().cloned().unwrap_or_default();
    let window = if release.decode_window_ids && first {
        let prompt = item["meta_info"]["prompt_tokens"].as_u64().unwrap_or(0);
        usize::try_from(prompt.min(5)).unwrap_or(0)
    } else {
        0
    };
    ids[window.min(ids.len())..].to_vec()
}

/// A `/generate` call running on its own task, so the test can move the clock and act meanwhile.
pub(crate) fn spawn_generate(server: &InProcess, body: Value) -> tokio::task::JoinHandle<Reply> {
    let server = server.clone();
    tokio::spawn(async move { server.generate(&body).await })
}

/// Move the paused clock forward in 100 ms steps, letting spawned requests run after each.
pub(crate) async fn advance_ms(ms: u64) {
    let mut left = ms;
    while left > 0 {
        let step = left.min(100);
        tokio::time::advance(std::time::Duration::from_millis(step)).await;
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        left -= step;
    }
}

pub(crate) fn data_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("data")
        .join(name)
}

/// A fixture parsed as JSON.
pub(crate) fn load_json(name: &str) -> Value {
    let path = data_path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// A response collected in full.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
    /// The body ended with an error (a broken connection) instead of cleanly; `body` is then empty.
    pub(crate) broken: bool,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub(crate) fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// A server driven in-process through `tower::ServiceExt::oneshot`, plus the oracle for its configuration.
#[derive(Debug, Clone)]
pub(crate) struct InProcess {
    pub(crate) state: AppState,
    pub(crate) oracle: Oracle,
}

impl InProcess {
    pub(crate) fn new(config: ServerConfig) -> InProcess {
        let state = AppState::new(config).expect("valid test config");
        let oracle = state.oracle();
        InProcess { state, oracle }
    }

    pub(crate) async fn request(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Body>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(body.into()).expect("valid request");
        let resp = mock_server::app(self.state.clone())
            .oneshot(req)
            .await
            .expect("infallible service");
        let status = resp.status();
        let headers = resp.headers().clone();
        let (body, broken) = match resp.into_body().collect().await {
            Ok(collected) => (collected.to_bytes().to_vec(), false),
            Err(_) => (Vec::new(), true),
        };
        Reply {
            status,
            headers,
            body,
            broken,
        }
    }

    pub(crate) async fn get(&self, path: &str) -> Reply {
        self.request(Method::GET, path, Body::empty(), &[]).await
    }

    pub(crate) async fn post(&self, path: &str, body: impl Into<Body>) -> Reply {
        self.request(
            Method::POST,
            path,
            body,
            &[("content-type", "application/json")],
        )
        .await
    }

    /// `POST /admin/reset`: among the rest, every prompt's next unseeded sample is its first draw again
    /// (MODEL.md 8.3), so a request sent again after it is the same sample as the first time.
    pub(crate) async fn reset(&self) {
        let reply = self.post("/admin/reset", Body::empty()).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }

    pub(crate) async fn generate(&self, body: &Value) -> Reply {
        self.post("/generate", serde_json::to_vec(body).expect("serialisable"))
            .await
    }
}

/// A live server on 127.0.0.1:0, stopped when dropped.
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) addr: SocketAddr,
    pub(crate) oracle: Oracle,
    pub(crate) client: reqwest::Client,
    server: mock_server::Server,
}

impl Live {
    pub(crate) async fn start(config: ServerConfig) -> Live {
        let server = mock_server::Server::start(ServerConfig { port: 0, ..config })
            .await
            .expect("valid test config");
        Live {
            addr: server.addr(),
            oracle: server.oracle(),
            client: reqwest::Client::new(),
            server,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) async fn post_json(&self, path: &str, body: &Value) -> Reply {
        let resp = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(body).expect("serialisable"))
            .send()
            .await
            .expect("request sent");
        let status = StatusCode::from_u16(resp.status().as_u16()).expect("valid status");
        let mut headers = HeaderMap::new();
        for (k, v) in resp.headers() {
            if let (Ok(name), Ok(value)) = (
                axum::http::HeaderName::from_bytes(k.as_str().as_bytes()),
                axum::http::HeaderValue::from_bytes(v.as_bytes()),
            ) {
                headers.insert(name, value);
            }
        }
        let (body, broken) = match resp.bytes().await {
            Ok(bytes) => (bytes.to_vec(), false),
            Err(_) => (Vec::new(), true),
        };
        Reply {
            status,
            headers,
            body,
            broken,
        }
    }

    /// `GET path`, answered 200 with JSON.
    pub(crate) async fn get_json(&self, path: &str) -> Value {
        let resp = self
            .client
            .get(self.url(path))
            .send()
            .await
            .expect("request sent");
        assert_eq!(resp.status().as_u16(), 200, "GET {path}");
        parse_json(&resp.bytes().await.expect("a body"))
    }

    /// Stop accepting, finish in-flight requests, and report how `run` ended.
    pub(crate) async fn stop(self) -> std::io::Result<()> {
        self.server.shutdown().await
    }
}

/// A strict reader of SGLang's SSE framing: the body must be exactly a sequence of `data: <payload>\n\n`
/// events ending with `data: [DONE]\n\n`, with nothing else. Returns the payloads before `[DONE]`.
pub(crate) fn read_sse(body: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut events = Vec::new();
    let mut rest = body;
    loop {
        if rest.is_empty() {
            return Err("the stream ended without data: [DONE]".to_owned());
        }
        let Some(after) = rest.strip_prefix(b"data: ") else {
            return Err(format!(
                "expected `data: ` at byte {}, found {:?}",
                body.len() - rest.len(),
                String::from_utf8_lossy(&rest[..rest.len().min(20)])
            ));
        };
        let Some(end) = after.windows(2).position(|w| w == b"\n\n") else {
            return Err("an event is not terminated by \\n\\n".to_owned());
        };
        let payload = &after[..end];
        if payload.contains(&b'\n') || payload.contains(&b'\r') {
            return Err("an event payload spans lines".to_owned());
        }
        rest = &after[end + 2..];
        if payload == b"[DONE]" {
            if !rest.is_empty() {
                return Err(format!("{} bytes after data: [DONE]", rest.len()));
            }
            return Ok(events);
        }
        events.push(payload.to_vec());
    }
}

/// The payloads of an SSE body as JSON values.
pub(crate) fn sse_json(body: &[u8]) -> Vec<Value> {
    read_sse(body)
        .unwrap_or_else(|e| panic!("bad SSE framing: {e}\n{}", String::from_utf8_lossy(body)))
        .iter()
        .map(|p| serde_json::from_slice(p).expect("event payload is JSON"))
        .collect()
}

/// A body as JSON. Its objects keep their keys in document order: the workspace builds serde_json with
/// `preserve_order`, so a key-order check reads a `Value` as SGLang wrote it.
/// The one problem of an audit report, as its kind, start and end; fails unless the report has exactly one.
pub(crate) fn sole_problem(report: &Value) -> (&Value, &Value, &Value) {
    let problems = report["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 1, "{report:#}");
    let problem = &problems[0];
    (&problem["kind"], &problem["start"], &problem["end"])
}

pub(crate) fn parse_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("valid JSON")
}

/// An object's keys in order; none for anything else.
pub(crate) fn keys(value: &Value) -> Vec<&str> {
    value
        .as_object()
        .map(|object| object.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// A value's JSON kind, with integers told from floats as the document wrote them.
pub(crate) fn kind(value: &Value) -> &'static str {
    mock_server::judge::compare::type_name(value)
}

/// Check that `actual` has the shape of `golden`: the same keys in the same order in every object, the same
/// JSON kinds (an int where the golden has a float counts as a number, and a float slot may be null), and
/// array elements shaped like the golden's (a golden `[]` requires `[]`). Values are not compared. Returns
/// every difference with its path.
pub(crate) fn shape_diff(golden: &Value, actual: &Value, path: &str, out: &mut Vec<String>) {
    match (golden, actual) {
        (Value::Object(g), Value::Object(a)) => {
            let gk: Vec<&str> = g.keys().map(String::as_str).collect();
            let ak: Vec<&str> = a.keys().map(String::as_str).collect();
            if gk != ak {
                out.push(format!("{path}: keys {ak:?}, golden {gk:?}"));
                return;
            }
            for ((k, gv), av) in g.iter().zip(a.values()) {
                shape_diff(gv, av, &format!("{path}.{k}"), out);
            }
        }
        (Value::Array(g), Value::Array(a)) => {
            if g.is_empty() {
                if !a.is_empty() {
                    out.push(format!("{path}: {} elements, golden []", a.len()));
                }
                return;
            }
            if a.is_empty() {
                out.push(format!("{path}: [], golden has {} elements", g.len()));
            }
            for (i, av) in a.iter().enumerate() {
                let gv = &g[i.min(g.len() - 1)];
                shape_diff(gv, av, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(_), Value::Number(_)) => {}
        // A logprob slot is `float | null` (null for the first input position and for -inf).
        (Value::Number(n), Value::Null) | (Value::Null, Value::Number(n)) if n.is_f64() => {}
        (g, a) if kind(g) == kind(a) => {}
        (g, a) => out.push(format!("{path}: {}, golden {}", kind(a), kind(g))),
    }
}

/// The final state of every item of a stream, rebuilt from its chunks under one output mode.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reassembled {
    pub(crate) text: String,
    pub(crate) output_ids: Vec<Value>,
    pub(crate) output_token_logprobs: Vec<Value>,
    pub(crate) output_top_logprobs: Vec<Value>,
    pub(crate) last_meta: Value,
    pub(crate) chunks: usize,
}

/// How a stream's chunks combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Cumulative,
    Incremental,
    Mid,
}

/// Rebuild each item (by `index`, or item 0 without one) from the chunks of a stream.
pub(crate) fn reassemble(chunks: &[Value], mode: Mode) -> Vec<Reassembled> {
    let mut items: Vec<Reassembled> = Vec::new();
    for chunk in chunks {
        let index = chunk.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        while items.len() <= index {
            items.push(Reassembled {
                text: String::new(),
                output_ids: Vec::new(),
                output_token_logprobs: Vec::new(),
                output_top_logprobs: Vec::new(),
                last_meta: Value::Null,
                chunks: 0,
            });
        }
        let item = &mut items[index];
        let text = chunk["text"].as_str().unwrap_or("").to_owned();
        let ids = chunk["output_ids"].as_array().cloned().unwrap_or_default();
        let meta = &chunk["meta_info"];
        let lps = meta["output_token_logprobs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let top = meta["output_top_logprobs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match mode {
            Mode::Cumulative => {
                item.text = text;
                item.output_ids = ids;
                item.output_token_logprobs = lps;
                item.output_top_logprobs = top;
            }
            Mode::Incremental => {
                item.text.push_str(&text);
                item.output_ids.extend(ids);
                item.output_token_logprobs.extend(lps);
                item.output_top_logprobs.extend(top);
            }
            Mode::Mid => {
                item.text = text;
                item.output_ids.extend(ids);
                item.output_token_logprobs = lps;
                item.output_top_logprobs = top;
            }
        }
        item.last_meta = meta.clone();
        item.chunks += 1;
    }
    items
}

/// A path as a command-line argument.
pub(crate) fn path_arg(path: &std::path::Path) -> String {
    path.to_str().expect("a UTF-8 path").to_owned()
}

/// Runs `python3 args...` off the async runtime and fails with its output unless it succeeds.
pub(crate) async fn python(args: Vec<String>) -> std::process::Output {
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3").args(&args).output()
    })
    .await
    .expect("the blocking task joins")
    .expect("python3 runs");
    assert!(
        output.status.success(),
        "python3 failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
