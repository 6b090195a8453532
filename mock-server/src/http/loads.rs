//! The load reports routers and trainers poll: `/get_load` (0.5.3, and 0.5.15's shim) and `/v1/loads` (0.5.15
//! and later), each in its release's shape ([`LoadReport`]) and from the server's real state: the items it
//! runs and queues ([`mock_core::engine::Occupancy`]) and the KV pool's used tokens, a prefix that running
//! requests share counted once and an evictable cached one not at all.
//!
//! As SGLang's scheduler counts them: a request per sample; tokens as `seqlen` (prompt and output so far); the
//! used tokens those of the running requests (SGLang's own count runs a token or two ahead of what the client
//! has seen, as its overlap scheduler allocates the next step's slot first); `num_total_tokens` the used ones
//! plus the waiting requests'. `gen_throughput`, `cache_hit_rate` and `utilization` are the metrics
//! collector's, 0.0 without `--enable-metrics`; with it the mock reports the last prefill's hit rate and
//! leaves the two rates that measure GPU time at 0.0, as it leaves `total_prefill_busy_us` and
//! `decode_moments` (its steps take no measured time). `memory` has no accelerator behind it: 0.0 GB, the
//! pool's `token_capacity`.

use axum::extract::{Query, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::drive::unix_now;
use super::extract::error_response;
use super::info::{iso8601_utc, max_total_num_tokens};
use super::respond::{Ordered, json_value, ordered};
use super::state::AppState;
use crate::error::ApiError;
use mock_core::engine::Load;
use mock_core::release::LoadReport;
use mock_core::request::{py_repr, query_int};

/// The running-request cap the releases report when `--max-running-requests` is not given (with a pool of
/// 65,536 tokens: `mock-server/conform/golden/`).
const DEFAULT_MAX_RUNNING_REQUESTS: usize = 4096;

/// The sections `include` may name (`LoadSnapshot.VALID_SECTIONS`).
const VALID_SECTIONS: [&str; 7] = ["core", "memory", "spec", "lora", "disagg", "queues", "all"];

/// What one load report reads: the board, the pool's used tokens, and the server's limits.
struct Reading {
    load: Load,
    used: usize,
    max_total: usize,
    max_running: usize,
    cache_hit_rate: f64,
}

impl Reading {
    fn of(state: &AppState) -> Reading {
        let (load, used) = state.load();
        let config = state.config();
        Reading {
            load,
            used,
            max_total: max_total_num_tokens(config),
            max_running: config
                .max_running_requests
                .unwrap_or(DEFAULT_MAX_RUNNING_REQUESTS),
            cache_hit_rate: match config.enable_metrics {
                true => state.metrics().cache_hit_rate(),
                false => 0.0,
            },
        }
    }

    /// `num_total_tokens`: the used tokens and the waiting requests'.
    fn total(&self) -> usize {
        self.used + self.load.waiting_tokens
    }

    /// `token_usage`: the used share of the pool, rounded to 4 places.
    fn token_usage(&self) -> f64 {
        round4(self.used as f64 / self.max_total.max(1) as f64)
    }
}

/// Python's `round(x, 4)` for the shares the reports print.
fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// `/get_load`: the scheduler's answer (0.5.3) or 0.5.15's shim over `/v1/loads`.
pub(crate) async fn get_load(State(state): State<AppState>) -> Response {
    let r = Reading::of(&state);
    let requests = r.load.running + r.load.waiting;
    match state.config().sglang_version.load_report {
        // `Scheduler.get_load`: the used tokens plus the waiting requests' prompts; a single rank reports no
        // rank (`dp_rank` None) and the output no rid.
        LoadReport::Scheduler => json_value(&[ordered! {
            "rid": Value::Null,
            "dp_rank": Value::Null,
            "num_reqs": requests,
            "num_waiting_reqs": r.load.waiting,
            "num_tokens": r.total(),
        }]),
        LoadReport::Snapshot | LoadReport::SnapshotTotals => json_value(&[ordered! {
            "dp_rank": 0,
            "num_reqs": requests,
            "num_waiting_reqs": r.load.waiting,
            "num_tokens": r.total(),
            "num_pending_tokens": r.total() - r.used,
            "ts_tic": monotonic_seconds(),
        }]),
    }
}

/// `time.perf_counter()`: seconds on a monotonic clock from an arbitrary start (the process's here).
fn monotonic_seconds() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

/// `/v1/loads?dp_rank=&include=&format=`: every rank's load (the mock has rank 0), with the sections
/// `include` names (all by default), as JSON or, with `format=prometheus`, as Prometheus gauges.
pub(crate) async fn v1_loads(State(state): State<AppState>, uri: Uri) -> Response {
    // FastAPI reads the last of a repeated parameter; the query is percent-decoded.
    let params = Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|Query(params)| params)
        .unwrap_or_default();
    let param = |name: &str| {
        params
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    let rank = match param("dp_rank").map(|raw| query_int("dp_rank", raw)) {
        None => None,
        Some(Ok(rank)) => Some(rank),
        Some(Err(errors)) => {
            return error_response(ApiError::Pydantic(errors), &state, &Method::GET, uri.path());
        }
    };
    let include: Option<Vec<&str>> = param("include")
        .filter(|s| !s.is_empty())
        .map(|s| s.split(',').map(str::trim).collect());
    // `LoadSnapshot.to_dict` raises a `ValueError` outside the route's `try`: Starlette's plain 500.
    if let Some(bad) = include
        .iter()
        .flatten()
        .find(|s| !VALID_SECTIONS.contains(s))
    {
        tracing::error!(section = bad, "/v1/loads: invalid include section");
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "Internal Server Error",
        )
            .into_response();
    }
    let report = state.config().sglang_version.load_report;
    // One rank, 0: any other (a negative one too, or one past an int64) has no load.
    let loads: Vec<Ordered> = match rank {
        Some(Some(0)) | None => vec![load(&Reading::of(&state), report, include.as_deref())],
        Some(_) => Vec::new(),
    };
    if param("format") == Some("prometheus") {
        return prometheus(&loads);
    }
    let mut body = ordered! {
        "timestamp": iso8601_utc(unix_now()),
        "version": state.config().sglang_version.as_str(),
    };
    if report == LoadReport::SnapshotTotals {
        // `get_device_name()` names no accelerator on a CPU; one accelerator behind the rank.
        body.0.push(("accelerator", Value::Null));
        body.0.push(("num_accelerators", json!(1)));
    }
    body.0.push(("loads", json!(loads)));
    json_value(&body)
}

/// One rank's load: the core keys, then the sections `include` asks for (`None`: all) that the server has
/// (`memory`, `disaggregation`, `queues`; no speculative decoding, no LoRA).
fn load(r: &Reading, report: LoadReport, include: Option<&[&str]>) -> Ordered {
    let totals = report == LoadReport::SnapshotTotals;
    let total = r.total();
    let mut core = Ordered(Vec::with_capacity(24));
    if totals {
        core.0.push(("timestamp", json!(unix_now())));
    }
    core.0.extend(
        ordered! {
            "dp_rank": 0,
            "num_running_reqs": r.load.running,
            "num_waiting_reqs": r.load.waiting,
            // No prefix match is made in an `fcfs` waiting queue: a waiting request's every token counts.
            "num_waiting_uncached_tokens": r.load.waiting_tokens,
            "num_used_tokens": r.used,
            "num_total_tokens": total,
        }
        .0,
    );
    if totals {
        core.0.push(("num_active_tokens", json!(total)));
        core.0.push(("num_prealloc_ready_tokens", json!(0)));
    }
    core.0.extend(
        ordered! {
            "max_total_num_tokens": r.max_total,
            "max_running_requests": r.max_running,
            "token_usage": r.token_usage(),
            "gen_throughput": 0.0,
            "cache_hit_rate": round4(r.cache_hit_rate),
            "utilization": 0.0,
        }
        .0,
    );
    if totals {
        core.0.push((
            "total_prefill_uncached_tokens",
            json!(r.load.prefill_uncached),
        ));
        core.0.push(("total_prefill_busy_us", json!(0)));
        core.0.push(("decode_moments", Value::Null));
    }
    let wanted = |section: &str| {
        include.is_none_or(|names| names.contains(&"all") || names.contains(&section))
    };
    if wanted("memory") {
        core.0.push((
            "memory",
            json!(ordered! {
                "weight_gb": 0.0,
                "kv_cache_gb": 0.0,
                "graph_gb": 0.0,
                "token_capacity": r.max_total,
            }),
        ));
    }
    if wanted("disagg") {
        core.0.push((
            "disaggregation",
            json!(ordered! {
                "mode": "null",
                "prefill_bootstrap_queue_reqs": 0,
                "prefill_inflight_queue_reqs": 0,
                "decode_prealloc_queue_reqs": 0,
                "decode_transfer_queue_reqs": 0,
                "decode_retracted_queue_reqs": 0,
                "kv_transfer_speed_gb_s": 0.0,
                "kv_transfer_latency_ms": 0.0,
            }),
        ));
    }
    if wanted("queues") {
        let mut queues = ordered! {
            "waiting": r.load.waiting,
            "grammar": 0,
            "paused": 0,
            // The requests the last retraction for want of KV sent back (metrics-only in SGLang); a
            // `retract` pause's count as waiting.
            "retracted": 0,
        };
        if totals {
            queues.0.push(("prealloc_ready", json!(0)));
        }
        core.0.push(("queues", json!(queues)));
    }
    core
}

/// `_format_loads_prometheus`: a gauge per number (a section's as `sglang_<section>_<key>`, `disaggregation`
/// as `disagg`), labelled by rank, in the JSON's order; strings, lists and nulls are left out.
fn prometheus(loads: &[Ordered]) -> Response {
    let mut samples: Vec<(String, Vec<(i64, String)>)> = Vec::new();
    let mut push = |name: String, rank: i64, value: &Value| {
        if !value.is_number() {
            return;
        }
        let text = py_repr(value);
        match samples.iter_mut().find(|(n, _)| *n == name) {
            Some((_, list)) => list.push((rank, text)),
            None => samples.push((name, vec![(rank, text)])),
        }
    };
    for load in loads {
        let rank = load
            .0
            .iter()
            .find(|(key, _)| *key == "dp_rank")
            .and_then(|(_, v)| v.as_i64())
            .unwrap_or(0);
        for (key, value) in load.0.iter().filter(|(key, _)| *key != "dp_rank") {
            let Value::Object(section) = value else {
                push(format!("sglang_{key}"), rank, value);
                continue;
            };
            let prefix = match *key {
                "disaggregation" => "disagg",
                other => other,
            };
            for (sub, v) in section {
                push(format!("sglang_{prefix}_{sub}"), rank, v);
            }
        }
    }
    let mut text = String::new();
    for (name, list) in &samples {
        text.push_str(&format!("# TYPE {name} gauge\n"));
        for (rank, value) in list {
            text.push_str(&format!("{name}{{dp_rank=\"{rank}\"}} {value}\n"));
        }
    }
    if text.is_empty() {
        text.push('\n');
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
