//! `sglang-mock replay`: a server that answers from a [`Recording`]. A request is matched on its canonical
//! form ([`Canonical`]: method, path, and the body with volatile fields such as `rid` left out and object keys
//! sorted); among equal requests the earliest recorded exchange not yet replayed answers. The answer is the
//! recorded one, byte for byte, its chunks sent at the recorded times divided by the speed (0: at once); an
//! exchange whose body ended early ends early again, with a broken connection.
//!
//! A request with no match is answered `500` with a JSON body naming the nearest recorded request and where
//! it differs, and is counted in the [`ReplayReport`], as are the exchanges never replayed.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use serde::Serialize;
use serde_json::Value;

use super::listen::{Listening, read_request};
use super::recording::{Exchange, Recording};

/// The header a replay's own answer (a request with no match) carries, so that it is never taken for
/// SGLang's.
pub const MISS_HEADER: &str = "x-sglang-mock-replay";

/// How a replay serves.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub host: String,
    /// 0 picks a free port.
    pub port: u16,
    /// 1 sends a stream's chunks at the recorded times, 2 twice as fast, 0 at once.
    pub speed: f64,
    /// Top-level body fields left out of the match (a fresh `rid` on every run).
    pub ignore: Vec<String>,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            host: "127.0.0.1".to_owned(),
            port: 0,
            speed: 1.0,
            ignore: vec!["rid".to_owned()],
        }
    }
}

/// What a replay served: how many requests it answered from the recording, the ones it could not, and the
/// recorded exchanges it never replayed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplayReport {
    pub served: u64,
    /// One line per request with no match, naming the nearest recorded request.
    pub misses: Vec<String>,
    /// `#seq METHOD PATH` of each exchange never replayed, in recorded order.
    pub unused: Vec<String>,
}

impl ReplayReport {
    /// Every request was answered from the recording.
    pub fn ok(&self) -> bool {
        self.misses.is_empty()
    }
}

/// A running replay.
#[derive(Debug)]
pub struct Replay {
    listening: Listening,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    exchanges: Vec<Exchange>,
    canonical: Vec<Canonical>,
    speed: f64,
    ignore: Vec<String>,
    state: Mutex<ReplayState>,
}

#[derive(Debug, Default)]
struct ReplayState {
    /// The exchanges not yet replayed, by canonical request, earliest first.
    queues: HashMap<Canonical, VecDeque<usize>>,
    used: Vec<bool>,
    served: u64,
    misses: Vec<String>,
}

impl Replay {
    /// Serves `recording` on `options.host:options.port`.
    pub async fn start(recording: Recording, options: ReplayOptions) -> std::io::Result<Replay> {
        let canonical: Vec<Canonical> = recording
            .exchanges
            .iter()
            .map(|e| {
                Canonical::of(
                    &e.request.method,
                    &e.request.path,
                    &e.request.body.0,
                    &options.ignore,
                )
            })
            .collect();
        let mut queues: HashMap<Canonical, VecDeque<usize>> = HashMap::new();
        for (i, key) in canonical.iter().enumerate() {
            queues.entry(key.clone()).or_default().push_back(i);
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(ReplayState {
                queues,
                used: vec![false; recording.exchanges.len()],
                ..ReplayState::default()
            }),
            exchanges: recording.exchanges,
            canonical,
            speed: options.speed,
            ignore: options.ignore,
        });
        let router = axum::Router::new()
            .fallback(answer)
            .with_state(shared.clone());
        let listening = Listening::bind(&options.host, options.port, router).await?;
        tracing::info!(addr = %listening.addr(), exchanges = shared.exchanges.len(), "replaying");
        Ok(Replay { listening, shared })
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.listening.addr()
    }

    pub fn url(&self) -> String {
        self.listening.url()
    }

    /// What has been served so far.
    pub fn report(&self) -> ReplayReport {
        Replay::report_of(&self.shared)
    }

    /// Stops serving, waits for the answers in flight, and reports.
    pub async fn finish(self) -> std::io::Result<ReplayReport> {
        let shared = self.shared.clone();
        self.listening.stop().await?;
        Ok(Replay::report_of(&shared))
    }

    /// Serves until `signal` resolves, then finishes as [`Replay::finish`].
    pub async fn run_until(
        self,
        signal: impl Future<Output = ()>,
    ) -> std::io::Result<ReplayReport> {
        signal.await;
        self.finish().await
    }

    fn report_of(shared: &Arc<Shared>) -> ReplayReport {
        let state = lock(&shared.state);
        ReplayReport {
            served: state.served,
            misses: state.misses.clone(),
            unused: shared
                .exchanges
                .iter()
                .zip(&state.used)
                .filter(|(_, used)| !**used)
                .map(|(e, _)| format!("#{} {} {}", e.seq, e.request.method, e.request.path))
                .collect(),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A request as a replay matches it: method, path with query, and the body in canonical form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Canonical {
    method: String,
    path: String,
    body: CanonicalBody,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum CanonicalBody {
    /// A JSON body, written with sorted keys and the ignored top-level fields left out.
    Json(String),
    /// Any other body, as its bytes.
    Bytes(Vec<u8>),
}

impl Canonical {
    /// The canonical form of a request: `ignore` names top-level fields of a JSON object body that a client
    /// sets afresh on every run.
    pub fn of(method: &str, path: &str, body: &[u8], ignore: &[String]) -> Canonical {
        let body = match serde_json::from_slice::<Value>(body) {
            Ok(value) => CanonicalBody::Json(sorted(&without(value, ignore)).to_string()),
            Err(_) => CanonicalBody::Bytes(body.to_vec()),
        };
        Canonical {
            method: method.to_owned(),
            path: path.to_owned(),
            body,
        }
    }
}

#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "only an object has fields to leave out"
)]
fn without(value: Value, ignore: &[String]) -> Value {
    match value {
        Value::Object(mut map) => {
            for name in ignore {
                map.remove(name);
            }
            Value::Object(map)
        }
        other => other,
    }
}

/// `value` with every object's keys in sorted order (a `BTreeMap` sorts them).
#[expect(
    clippy::wildcard_enum_match_arm,
    reason = "a scalar is its own canonical form"
)]
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let ordered: BTreeMap<&String, Value> =
                map.iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(ordered.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// Where a sent request differs from a recorded one: `(where, recorded, sent)`.
type Differences = Vec<(String, String, String)>;

/// Where two JSON values differ: `(path, recorded, sent)` for each differing leaf, objects compared by key.
fn json_differences(path: &str, recorded: &Value, sent: &Value, out: &mut Differences) {
    match (recorded, sent) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let at = join(path, key);
                match b.get(key) {
                    Some(other) => json_differences(&at, value, other, out),
                    None => out.push((at, value.to_string(), "nothing".to_owned())),
                }
            }
            for (key, value) in b {
                if !a.contains_key(key) {
                    out.push((join(path, key), "nothing".to_owned(), value.to_string()));
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                json_differences(&format!("{path}[{i}]"), x, y, out);
            }
        }
        _ if recorded == sent => {}
        _ => out.push((
            if path.is_empty() {
                "the body".to_owned()
            } else {
                path.to_owned()
            },
            shorten(&recorded.to_string()),
            shorten(&sent.to_string()),
        )),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn shorten(text: &str) -> String {
    const MAX: usize = 80;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        format!("{}...", text.chars().take(MAX).collect::<String>())
    }
}

impl Shared {
    /// Why a request has no match: the nearest recorded request (same method and path first, then the fewest
    /// differing fields), and how it differs.
    fn explain_miss(
        &self,
        key: &Canonical,
        method: &str,
        path: &str,
        body: &[u8],
        used: &[bool],
    ) -> String {
        let sent = format!("{method} {path}");
        let same_request = self
            .canonical
            .iter()
            .enumerate()
            .filter(|(_, k)| *k == key)
            .count();
        if same_request > 0 {
            return format!(
                "{sent}: this request was recorded {same_request} time(s), and every one has been replayed"
            );
        }
        let sent_json = serde_json::from_slice::<Value>(body)
            .ok()
            .map(|v| without(v, &self.ignore));
        let mut best: Option<(usize, usize, Differences)> = None;
        for (i, exchange) in self.exchanges.iter().enumerate() {
            let request = &exchange.request;
            let mut differences = Vec::new();
            let mut cost = 0;
            if request.method != method {
                cost += 1000;
                differences.push((
                    "the method".to_owned(),
                    request.method.clone(),
                    method.to_owned(),
                ));
            }
            if request.path != path {
                cost += 100;
                differences.push(("the path".to_owned(), request.path.clone(), path.to_owned()));
            }
            let recorded_json = serde_json::from_slice::<Value>(&request.body.0)
                .ok()
                .map(|v| without(v, &self.ignore));
            match (&recorded_json, &sent_json) {
                (Some(a), Some(b)) => json_differences("", a, b, &mut differences),
                _ if request.body.0 == body => {}
                _ => differences.push((
                    "the body".to_owned(),
                    shorten(&String::from_utf8_lossy(&request.body.0)),
                    shorten(&String::from_utf8_lossy(body)),
                )),
            }
            cost += differences.len();
            // An exchange not yet replayed is nearer than a used one that differs as much.
            let rank = cost * 2 + usize::from(used[i]);
            if best.as_ref().is_none_or(|(r, _, _)| rank < *r) {
                best = Some((rank, i, differences));
            }
        }
        let Some((_, i, differences)) = best else {
            return format!("{sent}: the recording holds no exchanges");
        };
        let nearest = &self.exchanges[i];
        let shown: Vec<String> = differences
            .iter()
            .take(3)
            .map(|(at, recorded, sent)| format!("{at} (recorded {recorded}, sent {sent})"))
            .collect();
        let more = differences.len().saturating_sub(3);
        format!(
            "{sent}: no recorded request matches; the nearest is #{} {} {}, which differs at {}{}",
            nearest.seq,
            nearest.request.method,
            nearest.request.path,
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more place(s)")
            } else {
                String::new()
            }
        )
    }
}

/// The replay's one handler.
async fn answer(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, path, body) = match read_request(request).await {
        Ok(read) => read,
        Err(err) => return miss_response(&format!("cannot read the request body: {err}")),
    };
    let method = parts.method.to_string();
    let key = Canonical::of(&method, &path, &body, &shared.ignore);
    let found = {
        let mut state = lock(&shared.state);
        let next = state.queues.get_mut(&key).and_then(VecDeque::pop_front);
        match next {
            Some(i) => {
                state.used[i] = true;
                state.served += 1;
                Ok(i)
            }
            None => {
                let message = shared.explain_miss(&key, &method, &path, &body, &state.used);
                state.misses.push(message.clone());
                Err(message)
            }
        }
    };
    match found {
        Ok(i) => replayed(&shared.exchanges[i], shared.speed),
        Err(message) => {
            tracing::warn!("{message}");
            miss_response(&message)
        }
    }
}

/// The replay's own 500, never taken for SGLang's: the message and the [`MISS_HEADER`].
fn miss_response(message: &str) -> Response {
    let body = serde_json::json!({
        "error": {"message": format!("replay: {message}"), "type": "SglangMockReplayMiss"}
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    headers.insert(MISS_HEADER, axum::http::HeaderValue::from_static("miss"));
    response
}

/// The recorded answer of `exchange`, its chunks at the recorded times scaled by `speed`.
fn replayed(exchange: &Exchange, speed: f64) -> Response {
    let recorded = &exchange.response;
    let mut schedule: Vec<(Duration, bytes::Bytes)> = Vec::with_capacity(recorded.chunks.len());
    let mut previous = 0.0;
    for chunk in &recorded.chunks {
        let wait = if speed > 0.0 {
            Duration::from_secs_f64(((chunk.ms - previous).max(0.0) / speed) / 1000.0)
        } else {
            Duration::ZERO
        };
        previous = chunk.ms;
        schedule.push((wait, bytes::Bytes::from(chunk.data.0.clone())));
    }
    let complete = recorded.complete;
    let stream = futures_util::stream::unfold(
        (schedule.into_iter(), false),
        move |(mut rest, ended)| async move {
            if ended {
                return None;
            }
            match rest.next() {
                Some((wait, bytes)) => {
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    Some((Ok(bytes), (rest, false)))
                }
                // A body that ended early ends early again: the connection breaks.
                None if !complete => Some((
                    Err(std::io::Error::other("the recorded body ended early")),
                    (rest, true),
                )),
                None => None,
            }
        },
    );
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = axum::http::StatusCode::from_u16(recorded.status)
        .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in &recorded.headers {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            axum::http::HeaderValue::from_str(value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ignore() -> Vec<String> {
        vec!["rid".to_owned()]
    }

    #[test]
    fn the_canonical_form_ignores_key_order_and_the_rid() {
        let a = Canonical::of(
            "POST",
            "/generate",
            br#"{"text":"a","rid":"1","sampling_params":{"x":1,"y":2}}"#,
            &ignore(),
        );
        let b = Canonical::of(
            "POST",
            "/generate",
            br#"{"sampling_params":{"y":2,"x":1},"text":"a","rid":"2"}"#,
            &ignore(),
        );
        assert_eq!(a, b);
        let other = Canonical::of("POST", "/generate", br#"{"text":"b"}"#, &ignore());
        assert_ne!(a, other);
        // A nested rid is part of the request (an abort names the request it aborts).
        let nested = Canonical::of(
            "POST",
            "/generate",
            br#"{"text":"a","sampling_params":{"rid":1}}"#,
            &ignore(),
        );
        assert_ne!(
            Canonical::of(
                "POST",
                "/generate",
                br#"{"text":"a","sampling_params":{}}"#,
                &ignore()
            ),
            nested
        );
        // Not JSON: the bytes themselves.
        assert_ne!(
            Canonical::of("POST", "/generate", b"{not json", &ignore()),
            Canonical::of("POST", "/generate", b"{not  json", &ignore())
        );
    }

    #[test]
    fn a_miss_names_the_nearest_request_and_where_it_differs() {
        let recorded = |seq, path: &str, body: &str| Exchange {
            seq,
            at_ms: 0.0,
            request: super::super::recording::RecordedRequest {
                method: "POST".into(),
                path: path.into(),
                headers: vec![],
                body: super::super::recording::Bytes(body.as_bytes().to_vec()),
            },
            response: super::super::recording::RecordedResponse {
                status: 200,
                headers: vec![],
                chunks: vec![],
                complete: true,
                upstream_error: None,
            },
        };
        let exchanges = vec![
            recorded(0, "/v1/completions", r#"{"prompt":"a","max_tokens":8}"#),
            recorded(
                1,
                "/generate",
                r#"{"text":"a","sampling_params":{"max_new_tokens":8,"temperature":0}}"#,
            ),
            recorded(
                2,
                "/generate",
                r#"{"text":"b","sampling_params":{"max_new_tokens":4}}"#,
            ),
        ];
        let canonical = exchanges
            .iter()
            .map(|e| Canonical::of("POST", &e.request.path, &e.request.body.0, &ignore()))
            .collect();
        let shared = Shared {
            exchanges,
            canonical,
            speed: 0.0,
            ignore: ignore(),
            state: Mutex::new(ReplayState::default()),
        };
        let sent = br#"{"text":"a","sampling_params":{"max_new_tokens":16,"temperature":0}}"#;
        let key = Canonical::of("POST", "/generate", sent, &ignore());
        let message = shared.explain_miss(&key, "POST", "/generate", sent, &[false; 3]);
        assert_eq!(
            message,
            "POST /generate: no recorded request matches; the nearest is #1 POST /generate, which differs at \
             sampling_params.max_new_tokens (recorded 8, sent 16)"
        );
        let again = br#"{"prompt":"a","max_tokens":8}"#;
        let key = Canonical::of("POST", "/v1/completions", again, &ignore());
        let message = shared.explain_miss(
            &key,
            "POST",
            "/v1/completions",
            again,
            &[true, false, false],
        );
        assert_eq!(
            message,
            "POST /v1/completions: this request was recorded 1 time(s), and every one has been replayed"
        );
    }
}
