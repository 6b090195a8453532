//! The load reports against the running releases: the states of `scripts/load_probe.py` (idle after a request;
//! one request running while another waits for the one running slot), whose `/v1/loads` and `/get_load` each
//! release answered (`mock-server/conform/loads/<release>.json`), replayed on the mock under a paused clock; and
//! what the reports add up to: the used tokens of running requests sharing a cached prefix, the query
//! parameters, the Prometheus form.

use axum::http::StatusCode;
use mock_server::{LatencyConfig, ServerConfig, SglangVersion};
use serde_json::{Value, json};

use crate::common::{InProcess, spawn_generate};

/// `scripts/load_probe.py`'s prompts.
fn ids(start: u64, n: u64) -> Vec<u64> {
    (start..start + n).collect()
}

fn body(prompt: &[u64], new_tokens: u64) -> Value {
    json!({"input_ids": prompt, "sampling_params": {"max_new_tokens": new_tokens, "ignore_eos": true,
        "temperature": 0}})
}

async fn loads(server: &InProcess) -> Value {
    let reply = server.get("/v1/loads").await;
    assert_eq!(reply.status, StatusCode::OK);
    reply.json()["loads"][0].clone()
}

/// What `load_probe.py`'s `idle_observation` reads.
async fn idle_observation(server: &InProcess, version: SglangVersion) -> Value {
    let mut out = json!({});
    if version != SglangVersion::V0_5_3 {
        let load = loads(server).await;
        let mut v1 = json!({});
        for key in [
            "num_running_reqs",
            "num_waiting_reqs",
            "num_waiting_uncached_tokens",
            "num_used_tokens",
            "num_total_tokens",
            "token_usage",
            "queues",
        ] {
            v1[key] = load[key].clone();
        }
        out["v1_loads"] = v1;
    }
    if version != SglangVersion::V0_5_23 {
        let legacy = server.get("/get_load").await.json()[0].clone();
        out["get_load"] = json!({"num_reqs": legacy["num_reqs"],
            "num_waiting_reqs": legacy["num_waiting_reqs"], "num_tokens": legacy["num_tokens"]});
    }
    out
}

/// What `load_probe.py`'s `observe` reads while one request runs and one waits.
async fn queued_observation(server: &InProcess, version: SglangVersion, idle_total: u64) -> Value {
    let (running_prompt, waiting_prompt) = (64, 20);
    let mut out = json!({});
    if version != SglangVersion::V0_5_3 {
        let load = loads(server).await;
        let used = load["num_used_tokens"].as_u64().expect("used");
        let mut v1 = json!({
            "num_running_reqs": load["num_running_reqs"],
            "num_waiting_reqs": load["num_waiting_reqs"],
            "num_waiting_uncached_tokens": load["num_waiting_uncached_tokens"],
            "pending_tokens": load["num_total_tokens"].as_u64().expect("total") - used,
            "used_at_least_a_prompt": used >= running_prompt,
            "queues": load["queues"],
        });
        if let Some(total) = load["total_prefill_uncached_tokens"].as_u64() {
            v1["prefill_uncached_since_idle"] = json!(total - idle_total);
        }
        out["v1_loads"] = v1;
    }
    if version != SglangVersion::V0_5_23 {
        let legacy = server.get("/get_load").await.json()[0].clone();
        let waiting = legacy["num_waiting_reqs"].as_u64().expect("waiting");
        let mut get_load = json!({"num_reqs": legacy["num_reqs"], "num_waiting_reqs": waiting,
            "tokens_at_least_both_prompts": legacy["num_tokens"].as_u64().expect("tokens")
                >= running_prompt + if waiting > 0 { waiting_prompt } else { 0 }});
        if let Some(pending) = legacy.get("num_pending_tokens") {
            get_load["num_pending_tokens"] = pending.clone();
        }
        out["get_load"] = get_load;
    }
    out
}

/// Each recorded release's two states on the mock: the running request is slowed by a paused clock instead
/// of a CPU, so it is still running when the waiting one has queued behind it.
#[tokio::test(start_paused = true)]
async fn the_load_reports_count_what_the_releases_count() {
    for version in SglangVersion::all() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("conform/loads/{}.json", version.as_str()));
        let text = std::fs::read_to_string(&path).expect("a recording per release");
        let recording: Value = serde_json::from_str(&text).expect("JSON");
        let states = recording["states"].as_array().expect("states");
        let server = InProcess::new(ServerConfig {
            sglang_version: version,
            max_running_requests: Some(1),
            latency: LatencyConfig {
                itl_ms: 10.0,
                ..LatencyConfig::default()
            },
            ..ServerConfig::default()
        });
        let running = ids(1000, 64);
        server.generate(&body(&running, 4)).await;
        let idle = idle_observation(&server, version).await;
        assert_eq!(idle, states[0]["observed"], "{version}: idle");
        let idle_total = match version == SglangVersion::V0_5_23 {
            true => loads(&server).await["total_prefill_uncached_tokens"]
                .as_u64()
                .expect("a total"),
            false => 0,
        };
        let reversed: Vec<u64> = running.iter().rev().copied().collect();
        let long = spawn_generate(&server, body(&reversed, 400));
        tokio::time::sleep(std::time::Duration::from_millis(55)).await;
        let short = spawn_generate(&server, body(&ids(3000, 20), 2));
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        let queued = queued_observation(&server, version, idle_total).await;
        assert_eq!(queued, states[1]["observed"], "{version}: queued");
        let (long, short) = (long.await.expect("joins"), short.await.expect("joins"));
        assert_eq!(long.json()["meta_info"]["completion_tokens"], json!(400));
        assert_eq!(short.json()["meta_info"]["completion_tokens"], json!(2));
        assert_eq!(
            idle_observation(&server, version).await,
            states[0]["observed"],
            "{version}: idle again"
        );
    }
}

/// The KV pool's used tokens while two requests of one 64-token prompt run side by side: with the prefix
/// cache the second hits 63 of the first's prompt tokens and computes the last, which it gives back when its
/// prefill keys a prompt the tree already has, so the prompt counts once; without the cache, twice. The same
/// paused clock runs both servers, so each request has made as many tokens in both.
#[tokio::test(start_paused = true)]
async fn running_requests_that_share_a_cached_prefix_use_it_once() {
    let used = |disable_radix_cache: bool| async move {
        let server = InProcess::new(ServerConfig {
            sglang_version: SglangVersion::V0_5_23,
            disable_radix_cache,
            latency: LatencyConfig {
                itl_ms: 10.0,
                ..LatencyConfig::default()
            },
            ..ServerConfig::default()
        });
        let prompt = ids(1000, 64);
        let first = spawn_generate(&server, body(&prompt, 100));
        tokio::time::sleep(std::time::Duration::from_millis(55)).await;
        let second = spawn_generate(&server, body(&prompt, 100));
        tokio::time::sleep(std::time::Duration::from_millis(55)).await;
        let load = loads(&server).await;
        let cached = second.await.expect("joins").json()["meta_info"]["cached_tokens"].clone();
        first.await.expect("joins");
        let after = loads(&server).await;
        assert_eq!(after["num_used_tokens"], json!(0), "idle: nothing used");
        (load, cached)
    };
    let (shared, cached) = used(false).await;
    let (apart, uncached) = used(true).await;
    assert_eq!((cached, uncached), (json!(63), json!(0)));
    assert_eq!(shared["num_running_reqs"], json!(2));
    let (used, apart_used) = (&shared["num_used_tokens"], &apart["num_used_tokens"]);
    assert!(
        apart_used.as_u64() > Some(128),
        "two prompts and their outputs: {apart_used}"
    );
    assert_eq!(used.as_u64(), apart_used.as_u64().map(|n| n - 64));
    // Under 200 of --max-total-tokens' default 2^20, rounded to 4 places.
    assert_eq!(shared["token_usage"], json!(0.0001));
    assert_eq!(apart["token_usage"], json!(0.0001));
}

/// The query as FastAPI reads it, each answer as 0.5.23 gave it (`curl` against the running release): a
/// `dp_rank` Pydantic reads as an int names the one rank or none, one it cannot read is a 400 whose frame is
/// the route's own module; `include` is a comma list whose items are trimmed, the last of a repeated parameter
/// wins, an empty one means all, an unknown section is Starlette's plain 500.
#[tokio::test]
async fn the_query_selects_ranks_and_sections_as_fastapi_reads_it() {
    let server = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_23,
        ..ServerConfig::default()
    });
    let sections = |reply: &Value| -> Vec<String> {
        let load = reply["loads"][0].as_object().expect("a load");
        let core = load
            .keys()
            .position(|k| k == "decode_moments")
            .expect("core");
        load.keys().skip(core + 1).cloned().collect()
    };
    for (query, expected) in [
        ("", vec!["memory", "disaggregation", "queues"]),
        ("?include=", vec!["memory", "disaggregation", "queues"]),
        ("?include=all", vec!["memory", "disaggregation", "queues"]),
        ("?include=core", vec![]),
        ("?include=%20memory%20", vec!["memory"]),
        ("?include=core,queues", vec!["queues"]),
        ("?include=queues,disagg", vec!["disaggregation", "queues"]),
        ("?include=spec,lora", vec![]),
        ("?include=core&include=memory", vec!["memory"]),
        ("?dp_rank=0&include=core", vec![]),
        ("?dp_rank=%200", vec!["memory", "disaggregation", "queues"]),
        ("?dp_rank=0.0", vec!["memory", "disaggregation", "queues"]),
        ("?format=xml", vec!["memory", "disaggregation", "queues"]),
    ] {
        let reply = server.get(&format!("/v1/loads{query}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{query}");
        assert_eq!(sections(&reply.json()), expected, "{query}");
    }
    for query in [
        "?dp_rank=1",
        "?dp_rank=-1",
        "?dp_rank=1.0",
        "?dp_rank=99999999999999999999",
    ] {
        let reply = server.get(&format!("/v1/loads{query}")).await.json();
        assert_eq!(reply["loads"], json!([]), "{query}");
        let keys: Vec<&String> = reply.as_object().expect("an object").keys().collect();
        assert_eq!(
            keys,
            [
                "timestamp",
                "version",
                "accelerator",
                "num_accelerators",
                "loads"
            ],
            "{query}"
        );
    }
    let bad = server.get("/v1/loads?dp_rank=x").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        bad.json()["message"],
        json!(
            "1 validation error:\n  {'type': 'int_parsing', 'loc': ('query', 'dp_rank'), 'msg': 'Input should \
             be a valid integer, unable to parse string as an integer', 'input': 'x'}\n\n  File \
             \"/sgl-workspace/sglang/python/sglang/srt/entrypoints/v1_loads.py\", line 96, in get_loads\n    GET \
             /v1/loads [{'type': 'int_parsing', 'loc': ('query', 'dp_rank'), 'msg': 'Input should be a valid \
             integer, unable to parse string as an integer', 'input': 'x'}]"
        )
    );
    let unknown = server.get("/v1/loads?include=core,bogus").await;
    assert_eq!(unknown.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(unknown.content_type(), "text/plain; charset=utf-8");
    assert_eq!(unknown.text(), "Internal Server Error");
}

/// `format=prometheus`: one gauge per number, in the JSON's order, sections prefixed (`disaggregation` as
/// `disagg`), strings, lists and nulls left out. The names are the ones 0.5.23 and 0.5.15 printed.
#[tokio::test]
async fn the_prometheus_form_names_every_number_as_the_releases_do() {
    let names = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .map(|line| line.split('{').next().unwrap_or_default().to_owned())
            .collect()
    };
    let v23 = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_23,
        ..ServerConfig::default()
    });
    let reply = v23.get("/v1/loads?format=prometheus").await;
    assert_eq!(
        reply.content_type(),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = reply.text();
    assert_eq!(
        names(&text),
        [
            "sglang_timestamp",
            "sglang_num_running_reqs",
            "sglang_num_waiting_reqs",
            "sglang_num_waiting_uncached_tokens",
            "sglang_num_used_tokens",
            "sglang_num_total_tokens",
            "sglang_num_active_tokens",
            "sglang_num_prealloc_ready_tokens",
            "sglang_max_total_num_tokens",
            "sglang_max_running_requests",
            "sglang_token_usage",
            "sglang_gen_throughput",
            "sglang_cache_hit_rate",
            "sglang_utilization",
            "sglang_total_prefill_uncached_tokens",
            "sglang_total_prefill_busy_us",
            "sglang_memory_weight_gb",
            "sglang_memory_kv_cache_gb",
            "sglang_memory_graph_gb",
            "sglang_memory_token_capacity",
            "sglang_disagg_prefill_bootstrap_queue_reqs",
            "sglang_disagg_prefill_inflight_queue_reqs",
            "sglang_disagg_decode_prealloc_queue_reqs",
            "sglang_disagg_decode_transfer_queue_reqs",
            "sglang_disagg_decode_retracted_queue_reqs",
            "sglang_disagg_kv_transfer_speed_gb_s",
            "sglang_disagg_kv_transfer_latency_ms",
            "sglang_queues_waiting",
            "sglang_queues_grammar",
            "sglang_queues_paused",
            "sglang_queues_retracted",
            "sglang_queues_prealloc_ready",
        ]
    );
    assert!(text.contains(
        "# TYPE sglang_num_running_reqs gauge\nsglang_num_running_reqs{dp_rank=\"0\"} 0\n"
    ));
    assert!(
        text.contains("sglang_token_usage{dp_rank=\"0\"} 0.0\n"),
        "a Python float"
    );
    assert!(text.contains("sglang_max_total_num_tokens{dp_rank=\"0\"} 1048576\n"));
    assert_eq!(
        v23.get("/v1/loads?format=prometheus&dp_rank=3")
            .await
            .text(),
        "\n"
    );
    let v15 = InProcess::new(ServerConfig {
        sglang_version: SglangVersion::V0_5_15,
        ..ServerConfig::default()
    });
    let text = v15
        .get("/v1/loads?format=prometheus&include=core")
        .await
        .text();
    assert_eq!(
        names(&text),
        [
            "sglang_num_running_reqs",
            "sglang_num_waiting_reqs",
            "sglang_num_waiting_uncached_tokens",
            "sglang_num_used_tokens",
            "sglang_num_total_tokens",
            "sglang_max_total_num_tokens",
            "sglang_max_running_requests",
            "sglang_token_usage",
            "sglang_gen_throughput",
            "sglang_cache_hit_rate",
            "sglang_utilization",
        ]
    );
}
