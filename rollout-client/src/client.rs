//! The async HTTP client: a pooled `reqwest` client with auth, timeouts, retries and a concurrency limit.
//!
//! Retries cover connection errors, timeouts, 408, 429 and 5xx, with exponential backoff and
//! jitter, or the server's `Retry-After` when it sends one. Other 4xx are never retried: the
//! request itself is wrong. A stream is never retried once bytes of it arrived, because the caller
//! would otherwise see tokens twice; that case is [`ClientError::StreamInterrupted`].
//!
//! Retries are logged in summary, not one line per attempt: the first retry of each kind of failure
//! (`HTTP 503`, `connect`, ...) is logged in full, repeats are counted and reported at most every
//! [`RETRY_REPORT_INTERVAL`], and [`Client::retries`] gives the counts for a caller's own summary.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use tokio::sync::Semaphore;

use crate::channels::Asked;
use crate::decode;
use crate::error::{ClientError, ResponseError};
use crate::request::{AbortRequest, GenerateRequest};
use crate::splitmix;
use crate::stream::StreamDecoder;
use crate::turn::{self, Turn};
use crate::wire::StreamMode;

/// Backoff schedule. The delay before retry `k` (0-based) is
/// `min(initial_backoff * multiplier^k, max_backoff)`, reduced by a random fraction of up to
/// `jitter` so that many clients failing together do not retry in lockstep. A `Retry-After`
/// header replaces the computed delay, capped at `max_retry_after`.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 disables retrying.
    pub max_retries: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub multiplier: f64,
    /// In `[0, 1]`: 0 gives the exact exponential schedule, 1 "full jitter".
    pub jitter: f64,
    pub max_retry_after: Duration,
    /// Seed of the jitter generator; `None` seeds from the clock. Set it for reproducible delays.
    pub seed: Option<u64>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        // Five retries on the same statuses as sgl-router (`--retry-max-retries 5`).
        RetryPolicy {
            max_retries: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: 0.5,
            max_retry_after: Duration::from_secs(60),
            seed: None,
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `retry` (0-based); `unit` is a uniform draw from `[0, 1)`.
    pub fn backoff(&self, retry: u32, unit: f64) -> Duration {
        let exp = self.multiplier.max(1.0).powi(retry.min(64) as i32);
        let base = (self.initial_backoff.as_secs_f64() * exp).min(self.max_backoff.as_secs_f64());
        let factor = 1.0 - self.jitter.clamp(0.0, 1.0) * unit.clamp(0.0, 1.0);
        Duration::from_secs_f64((base * factor).max(0.0))
    }

    /// The delay actually used: the server's `Retry-After` when given (capped), else [`Self::backoff`].
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        match retry_after {
            Some(d) => d.min(self.max_retry_after),
            None => self.backoff(retry, unit),
        }
    }
}

/// Builder for [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    base_url: String,
    api_key: Option<String>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    retry: RetryPolicy,
    max_concurrency: usize,
    stream_mode: StreamMode,
    headers: HeaderMap,
    bad_header: Option<String>,
    rid_prefix: Option<String>,
    routes_row_len: Option<usize>,
}

impl ClientBuilder {
    /// The served model's MoE shape (`num_hidden_layers`, `num_experts_per_tok`; slime's `--num-layers` and
    /// `--moe-router-topk`): every `routed_experts` row must then hold `layers * experts_per_token` ids, as
    /// slime's reshape requires.
    pub fn moe_shape(mut self, layers: usize, experts_per_token: usize) -> Self {
        self.routes_row_len = Some(layers * experts_per_token);
        self
    }

    /// Give every single-prompt `/generate` request that has no `rid` of its own the id `<prefix><n>`, `n`
    /// counting up per client and written with 12 digits (so that no rid is a prefix of another), and keep the rids of those in flight ([`Client::in_flight_rids`]), so that a
    /// caller can abort exactly its own requests. (SGLang's tokenizer manager, 0.5.3 through 0.5.23, forwards
    /// an abort only for a rid that names a live request exactly; its scheduler then aborts every rid that
    /// starts with it, hence the fixed width.)
    pub fn rid_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.rid_prefix = Some(prefix.into());
        self
    }

    /// An extra header on every request, e.g. a router's routing key or the mock's `X-Mock-Fault`.
    /// An invalid name or value is reported by [`ClientBuilder::build`].
    pub fn header(mut self, name: &str, value: &str) -> Self {
        match (
            reqwest::header::HeaderName::from_bytes(name.as_bytes()),
            reqwest::header::HeaderValue::from_str(value),
        ) {
            (Ok(n), Ok(v)) => {
                self.headers.insert(n, v);
            }
            _ => self.bad_header = Some(name.to_owned()),
        }
        self
    }

    /// `Authorization: Bearer <key>` on every request (SGLang's `--api-key`, router `--api-key`).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Time allowed to open a TCP connection. Default 10 s.
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = Some(t);
        self
    }

    /// Time allowed for one attempt, from sending to the last byte of the body (so for a stream,
    /// the whole stream). Default: none, because generations can legitimately take minutes.
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = Some(t);
        self
    }

    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// At most this many generation and tokenization requests in flight from this client (and its clones).
    /// Control-plane requests (abort, pause, continue) are not counted, so that they reach the server while
    /// the limit is full of the generations they stop. Default 256.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n.max(1);
        self
    }

    /// How streamed chunks are reassembled; see [`StreamMode`]. Default [`StreamMode::Auto`].
    pub fn stream_mode(mut self, mode: StreamMode) -> Self {
        self.stream_mode = mode;
        self
    }

    pub fn build(self) -> Result<Client, ClientError> {
        let base_url = self.base_url.trim_end_matches('/').to_owned();
        // This build has no TLS (reqwest without default features), so only http:// can work.
        if !base_url.starts_with("http://") || base_url.len() <= "http://".len() {
            return Err(ClientError::InvalidBaseUrl { url: self.base_url });
        }
        if let Some(name) = self.bad_header {
            return Err(ClientError::InvalidHeader { name });
        }
        let mut http = reqwest::Client::builder()
            .default_headers(self.headers)
            .connect_timeout(self.connect_timeout.unwrap_or(Duration::from_secs(10)));
        if let Some(t) = self.request_timeout {
            http = http.timeout(t);
        }
        let http = http.build().map_err(ClientError::Build)?;
        let seed = self.retry.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0x5eed)
        });
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base_url,
                api_key: self.api_key,
                retry: self.retry,
                limit: Semaphore::new(self.max_concurrency),
                stream_mode: self.stream_mode,
                rng: AtomicU64::new(seed),
                rid_prefix: self.rid_prefix,
                next_rid: AtomicU64::new(0),
                in_flight: Mutex::default(),
                retries: RetryLog::default(),
                routes_row_len: self.routes_row_len,
            }),
            ledger: Arc::default(),
        })
    }
}

/// A cheap-to-clone handle on one connection pool, one concurrency limit and one retry policy.
///
/// Every handle also counts the output tokens of the turns it returned (its ledger, shared by its clones), so a
/// caller can hold the samples it built against what the server generated: see [`Client::scoped`].
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
    ledger: Arc<Ledger>,
}

/// What the server generated in the turns a client handed out.
#[derive(Debug, Default)]
struct Ledger {
    generated_tokens: AtomicU64,
}

struct Inner {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    retry: RetryPolicy,
    limit: Semaphore,
    stream_mode: StreamMode,
    rng: AtomicU64,
    rid_prefix: Option<String>,
    next_rid: AtomicU64,
    /// The rids given under `rid_prefix` whose requests have not ended.
    in_flight: Mutex<BTreeSet<String>>,
    retries: RetryLog,
    /// `layers * experts_per_token` of the served model, when the caller gave its MoE shape.
    routes_row_len: Option<usize>,
}

/// A rid given under the client's prefix, listed in flight until the request ends (or its future is dropped).
struct InFlight {
    inner: Arc<Inner>,
    rid: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut rids = self
            .inner
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        rids.remove(&self.rid);
    }
}

/// How often the counts of repeated retries are logged.
pub const RETRY_REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// The retries a client made, by kind of failure, and when repeats were last reported.
#[derive(Debug, Default)]
struct RetryLog {
    state: Mutex<RetryState>,
}

#[derive(Debug, Default)]
struct RetryState {
    /// Every retry so far, by kind.
    total: BTreeMap<String, u64>,
    /// Repeats not yet reported, by kind.
    unreported: BTreeMap<String, u64>,
    last_report: Option<Instant>,
}

impl RetryLog {
    /// Counts one retry of `error`: logs it in full when it is the first of its kind, and otherwise reports
    /// the repeats counted since the last report once [`RETRY_REPORT_INTERVAL`] has passed.
    fn note(&self, url: &str, retry: u32, delay: Duration, error: &ClientError) {
        let kind = retry_kind(error);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let count = state.total.entry(kind.clone()).or_insert(0);
        *count += 1;
        let now = Instant::now();
        if *count == 1 {
            state.last_report.get_or_insert(now);
            drop(state);
            tracing::warn!(
                url,
                retry = retry + 1,
                delay_ms = delay.as_millis() as u64,
                error = error as &dyn std::error::Error,
                "retrying request (further retries of this kind are counted, not logged)"
            );
            return;
        }
        *state.unreported.entry(kind).or_insert(0) += 1;
        let due = state
            .last_report
            .is_none_or(|last| now.duration_since(last) >= RETRY_REPORT_INTERVAL);
        if due {
            let repeats = std::mem::take(&mut state.unreported);
            state.last_report = Some(now);
            drop(state);
            tracing::warn!(
                repeats = %describe_counts(&repeats),
                "retried requests since the last report"
            );
        }
    }

    fn totals(&self) -> BTreeMap<String, u64> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.total.clone()
    }
}

/// The kind of a retried failure, as the retry log counts it: `HTTP 503`, `connect`, `timeout`, ...
fn retry_kind(error: &ClientError) -> String {
    match error {
        ClientError::Status { status, .. } => format!("HTTP {status}"),
        ClientError::Connect { .. } => "connect".to_owned(),
        ClientError::Timeout { .. } => "timeout".to_owned(),
        ClientError::Transport { .. } => "transport".to_owned(),
        ClientError::StreamInterrupted { .. } => "stream interrupted".to_owned(),
        ClientError::Response { .. } => "invalid response".to_owned(),
        ClientError::GaveUp { last, .. } => retry_kind(last),
        ClientError::InvalidBaseUrl { .. }
        | ClientError::InvalidHeader { .. }
        | ClientError::Build(_)
        | ClientError::Encode(_) => "client".to_owned(),
    }
}

/// `HTTP 503 x12, connect x3`.
pub fn describe_counts(counts: &BTreeMap<String, u64>) -> String {
    counts
        .iter()
        .map(|(kind, n)| format!("{kind} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret; only say whether there is one.
        f.debug_struct("Client")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("retry", &self.retry)
            .field("available_permits", &self.limit.available_permits())
            .field("stream_mode", &self.stream_mode)
            .finish()
    }
}

/// Whether a request counts against [`ClientBuilder::max_concurrency`]: generation and tokenization do,
/// control-plane requests (abort, pause, continue) do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Limited,
    Control,
}

/// One failed attempt and whether it may be retried.
struct Failure {
    error: ClientError,
    retryable: bool,
    retry_after: Option<Duration>,
}

impl Failure {
    fn fatal(error: ClientError) -> Failure {
        Failure {
            error,
            retryable: false,
            retry_after: None,
        }
    }

    fn retry(error: ClientError) -> Failure {
        Failure {
            error,
            retryable: true,
            retry_after: None,
        }
    }
}

impl Client {
    /// `base_url` is a server or router root such as `http://127.0.0.1:30000`.
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base_url: base_url.into(),
            api_key: None,
            connect_timeout: None,
            request_timeout: None,
            retry: RetryPolicy::default(),
            max_concurrency: 256,
            stream_mode: StreamMode::Auto,
            headers: HeaderMap::new(),
            bad_header: None,
            rid_prefix: None,
            routes_row_len: None,
        }
    }

    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    /// A handle on the same pool, limit and retry policy with a ledger of its own, starting at zero: a unit of
    /// work (a group, one run of the multi-agent system) counts the tokens it was given and holds them against
    /// the samples it built.
    pub fn scoped(&self) -> Client {
        Client {
            inner: Arc::clone(&self.inner),
            ledger: Arc::default(),
        }
    }

    /// The output tokens of every turn this handle and its clones returned (not those of a [`Client::scoped`]
    /// handle): what the server generated for this caller.
    pub fn generated_tokens(&self) -> u64 {
        self.ledger.generated_tokens.load(Ordering::Relaxed)
    }

    /// Every retry this client (and every handle on its pool) made, by kind of failure (`HTTP 503`,
    /// `connect`, ...).
    pub fn retries(&self) -> BTreeMap<String, u64> {
        self.inner.retries.totals()
    }

    /// The rid prefix of [`ClientBuilder::rid_prefix`], if any.
    pub fn rid_prefix(&self) -> Option<&str> {
        self.inner.rid_prefix.as_deref()
    }

    /// The rids given under [`ClientBuilder::rid_prefix`] (by this client and every handle on its pool) whose
    /// requests are in flight: what a caller that stops aborts on the server.
    pub fn in_flight_rids(&self) -> Vec<String> {
        let rids = self
            .inner
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        rids.iter().cloned().collect()
    }

    /// Counts the turns handed to the caller.
    fn deliver(&self, turns: Vec<Turn>) -> Vec<Turn> {
        let tokens: usize = turns.iter().map(|t| t.output_ids.len()).sum();
        self.ledger
            .generated_tokens
            .fetch_add(tokens as u64, Ordering::Relaxed);
        turns
    }

    /// One prompt, `n == 1`: one validated turn, streamed or not as `req.stream` says.
    pub async fn generate(&self, req: &GenerateRequest) -> Result<Turn, ClientError> {
        let url = self.url("/generate");
        let turns = self.generate_inner(req, &url, false).await?;
        if turns.len() != 1 {
            return Err(ClientError::Response {
                url,
                source: ResponseError::ExpectedObject { len: turns.len() },
            });
        }
        Ok(self.deliver(turns).remove(0))
    }

    /// Any request, including batches and `n > 1`: one validated turn per item, in the server's
    /// order (prompt-major), whether streamed or not.
    pub async fn generate_many(&self, req: &GenerateRequest) -> Result<Vec<Turn>, ClientError> {
        let url = self.url("/generate");
        Ok(self.deliver(self.generate_inner(req, &url, true).await?))
    }

    /// `POST /abort_request`. Pending generate calls then finish with an abort finish_reason.
    pub async fn abort(&self, req: &AbortRequest) -> Result<(), ClientError> {
        let body = Bytes::from(serde_json::to_vec(req).map_err(ClientError::Encode)?);
        self.post_admin("/abort_request", body).await
    }

    /// `POST /pause_generation`: new generate calls wait until [`Client::continue_generation`].
    /// `mode` is SGLang's (0.5.15 and later) `"abort"` (the default: in-flight requests finish with an abort),
    /// `"retract"` or `"in_place"`; `None` sends no body, as older servers expect.
    pub async fn pause_generation(&self, mode: Option<&str>) -> Result<(), ClientError> {
        let body = match mode {
            Some(mode) => serde_json::to_vec(&serde_json::json!({ "mode": mode }))
                .map_err(ClientError::Encode)?,
            None => Vec::new(),
        };
        self.post_admin("/pause_generation", Bytes::from(body))
            .await
    }

    /// `POST /continue_generation`: waiting and paused requests run again.
    pub async fn continue_generation(&self) -> Result<(), ClientError> {
        self.post_admin("/continue_generation", Bytes::new()).await
    }

    /// `POST /update_weights_from_disk`: the server loads the weights of the model directory `model_path` (a
    /// path on the server's machine) and labels what it generates from then on with `weight_version`, if given.
    /// A server that cannot load them answers 400 with its loader's message, the [`ClientError::Status`] this
    /// returns; it keeps serving the old weights.
    pub async fn update_weights_from_disk(
        &self,
        model_path: &str,
        weight_version: Option<&str>,
    ) -> Result<(), ClientError> {
        let mut body = serde_json::json!({ "model_path": model_path });
        if let Some(version) = weight_version {
            body["weight_version"] = serde_json::Value::from(version);
        }
        let body = serde_json::to_vec(&body).map_err(ClientError::Encode)?;
        self.post_admin("/update_weights_from_disk", Bytes::from(body))
            .await
    }

    /// POSTs a control-plane request whose answer carries nothing the client needs.
    async fn post_admin(&self, path: &str, body: Bytes) -> Result<(), ClientError> {
        let url = self.url(path);
        // Outside the concurrency limit: an abort or a pause must not queue behind the generations it stops.
        self.with_retries_in(Lane::Control, &url, body, |resp, url| async move {
            resp.bytes()
                .await
                .map_err(|e| Failure::retry(transport(&url, e)))?;
            Ok(())
        })
        .await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.inner.base_url, path)
    }

    async fn generate_inner(
        &self,
        req: &GenerateRequest,
        url: &str,
        many: bool,
    ) -> Result<Vec<Turn>, ClientError> {
        let (body, _in_flight) = self.encode(req)?;
        let logprobs = req.asked(self.inner.routes_row_len);
        let expected = req.expected_items();
        let array = req.expects_array();
        let mode = self.inner.stream_mode;
        if req.stream {
            return self
                .with_retries(url, body, |resp, url| {
                    read_stream(resp, url, mode, logprobs, expected)
                })
                .await;
        }
        self.with_retries(url, body, |resp, url| async move {
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| Failure::retry(transport(&url, e)))?;
            let parsed = if many || array {
                turn::parse_many(&bytes, logprobs).and_then(|t| {
                    if array && t.len() != expected {
                        Err(ResponseError::ItemCount {
                            expected,
                            got: t.len(),
                        })
                    } else {
                        Ok(t)
                    }
                })
            } else {
                turn::parse_single(&bytes, logprobs).map(|t| vec![t])
            };
            parsed.map_err(|source| Failure::fatal(ClientError::Response { url, source }))
        })
        .await
    }

    /// The JSON body of `req`, with a fresh rid under the client's prefix (listed in flight while the
    /// returned guard lives) when it has one and `req` is a single prompt without a rid.
    fn encode(&self, req: &GenerateRequest) -> Result<(Bytes, Option<InFlight>), ClientError> {
        #[derive(serde::Serialize)]
        struct WithRid<'a> {
            #[serde(flatten)]
            req: &'a GenerateRequest,
            rid: &'a str,
        }
        let Some(prefix) = self
            .inner
            .rid_prefix
            .as_deref()
            .filter(|_| req.rid.is_none() && !req.expects_array())
        else {
            let body = serde_json::to_vec(req).map_err(ClientError::Encode)?;
            return Ok((Bytes::from(body), None));
        };
        let n = self.inner.next_rid.fetch_add(1, Ordering::Relaxed);
        // Fixed width, so that no rid is a prefix of another: SGLang's scheduler aborts by prefix.
        let rid = format!("{prefix}{n:012}");
        let body = serde_json::to_vec(&WithRid { req, rid: &rid }).map_err(ClientError::Encode)?;
        let mut rids = self
            .inner
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        rids.insert(rid.clone());
        drop(rids);
        let guard = InFlight {
            inner: Arc::clone(&self.inner),
            rid,
        };
        Ok((Bytes::from(body), Some(guard)))
    }

    /// POSTs `body` to `url` within the concurrency limit, handing a 2xx response to `read`, retrying as
    /// the policy says.
    async fn with_retries<T, F, Fut>(
        &self,
        url: &str,
        body: Bytes,
        read: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(reqwest::Response, String) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        self.with_retries_in(Lane::Limited, url, body, read).await
    }

    async fn with_retries_in<T, F, Fut>(
        &self,
        lane: Lane,
        url: &str,
        body: Bytes,
        read: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(reqwest::Response, String) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let policy = &self.inner.retry;
        let mut retry = 0;
        loop {
            let failure = {
                // Held for the whole attempt, body included, and released before any backoff.
                let _permit = match lane {
                    Lane::Limited => Some(
                        self.inner
                            .limit
                            .acquire()
                            .await
                            .expect("the client never closes its semaphore"),
                    ),
                    Lane::Control => None,
                };
                match self.send(url, body.clone()).await {
                    Ok(resp) => match read(resp, url.to_owned()).await {
                        Ok(v) => return Ok(v),
                        Err(f) => f,
                    },
                    Err(f) => f,
                }
            };
            if !failure.retryable {
                return Err(failure.error);
            }
            if retry >= policy.max_retries {
                if retry == 0 {
                    return Err(failure.error);
                }
                return Err(ClientError::GaveUp {
                    attempts: retry + 1,
                    last: Box::new(failure.error),
                });
            }
            let delay = policy.delay(retry, failure.retry_after, self.next_unit());
            self.inner.retries.note(url, retry, delay, &failure.error);
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }

    /// Sends one request; a non-2xx answer becomes a [`Failure`] carrying SGLang's message.
    async fn send(&self, url: &str, body: Bytes) -> Result<reqwest::Response, Failure> {
        let mut rb = self
            .inner
            .http
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = &self.inner.api_key {
            rb = rb.bearer_auth(key);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| Failure::retry(transport(url, e)))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let retry_after = parse_retry_after(resp.headers());
        // A body that cannot be read only costs us the message; the status still says enough.
        let body = resp.bytes().await.unwrap_or_default();
        Err(Failure {
            error: ClientError::Status {
                url: url.to_owned(),
                status: status.as_u16(),
                message: error_message(&body),
                retry_after,
            },
            retryable: is_retryable_status(status),
            retry_after,
        })
    }

    /// A uniform draw from `[0, 1)` (SplitMix64), lock-free and reproducible from the seed.
    fn next_unit(&self) -> f64 {
        let state = self
            .inner
            .rng
            .fetch_add(splitmix::GAMMA, Ordering::Relaxed)
            .wrapping_add(splitmix::GAMMA);
        splitmix::unit(splitmix::mix(state))
    }
}

/// 408, 429 and every 5xx are worth retrying; other statuses mean the request is wrong.
pub fn is_retryable_status(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

/// `Retry-After` as delay-seconds (integer or decimal). HTTP-date values are not parsed; the
/// computed backoff is used for them instead.
pub fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    // `try_from` refuses negative, non-finite and absurdly large values instead of panicking.
    Duration::try_from_secs_f64(v.parse().ok()?).ok()
}

/// SGLang's message from `{"error":{"message"}}`, `{"object":"error","message"}` or
/// `{"detail":...}`; otherwise the start of the body (e.g. a plain-text 500).
pub fn error_message(body: &[u8]) -> String {
    if let Some(m) = decode::decode_error_body(body).and_then(|b| b.message()) {
        return m;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(512) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn transport(url: &str, source: reqwest::Error) -> ClientError {
    let url = url.to_owned();
    if source.is_timeout() {
        ClientError::Timeout { url, source }
    } else if source.is_connect() {
        ClientError::Connect { url, source }
    } else {
        ClientError::Transport { url, source }
    }
}

async fn read_stream(
    mut resp: reqwest::Response,
    url: String,
    mode: StreamMode,
    logprobs: Asked,
    expected: usize,
) -> Result<Vec<Turn>, Failure> {
    let mut dec = StreamDecoder::new(mode, logprobs);
    let mut received = false;
    loop {
        match resp.chunk().await {
            Ok(Some(bytes)) => {
                received |= !bytes.is_empty();
                if let Err(source) = dec.push(&bytes) {
                    return Err(Failure::fatal(ClientError::Response { url, source }));
                }
            }
            Ok(None) => break,
            // Nothing arrived yet: retrying cannot duplicate a token.
            Err(e) if !received => return Err(Failure::retry(transport(&url, e))),
            Err(source) => {
                return Err(Failure::fatal(ClientError::StreamInterrupted {
                    url,
                    chunks: dec.chunks(),
                    source,
                }));
            }
        }
    }
    dec.finish(Some(expected)).map_err(|source| {
        let error = ClientError::Response { url, source };
        // An empty 200 body is a connection the server dropped before answering.
        if received {
            Failure::fatal(error)
        } else {
            Failure::retry(error)
        }
    })
}
