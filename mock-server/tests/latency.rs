//! The latency model on tokio's paused clock (time to first token, inter-token latency, seeded jitter, the
//! time scale) and `/metrics` in Prometheus text with SGLang's names.

use std::time::Duration;

use mock_server::{LatencyConfig, ServerConfig};
use serde_json::{Value, json};

use crate::common::{InProcess, read_sse};

fn with_latency(latency: LatencyConfig) -> InProcess {
    InProcess::new(ServerConfig {
        latency,
        ..ServerConfig::default()
    })
}

fn body(prompt_ids: usize, tokens: u32, stream: bool) -> Value {
    json!({
        "input_ids": vec![100; prompt_ids],
        "stream": stream,
        "rid": "lat",
        "sampling_params": {"max_new_tokens": tokens, "ignore_eos": true},
    })
}

async fn timed(server: &InProcess, body: &Value) -> Duration {
    let t = tokio::time::Instant::now();
    let reply = server.generate(body).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    t.elapsed()
}

#[tokio::test(start_paused = true)]
async fn ttft_and_itl_add_up_exactly() {
    let config = LatencyConfig {
        ttft_ms: 100.0,
        ttft_per_token_ms: 2.0,
        itl_ms: 10.0,
        ..LatencyConfig::default()
    };
    let server = with_latency(config);
    // 100 + 2 x 5 prompt tokens before the first token, then 7 gaps of 10 ms.
    for stream in [false, true] {
        assert_eq!(
            timed(&server, &body(5, 8, stream)).await,
            Duration::from_millis(180),
            "stream={stream}"
        );
    }
    let halved = with_latency(LatencyConfig {
        time_scale: 0.5,
        ..config
    });
    assert_eq!(
        timed(&halved, &body(5, 8, false)).await,
        Duration::from_millis(90)
    );
    // Zero latency by default: no simulated time passes at all.
    let instant = InProcess::new(ServerConfig::default());
    assert_eq!(timed(&instant, &body(5, 8, false)).await, Duration::ZERO);
    // The batch loop of a bounded pool takes the same time per step: a prefill step the time to first token of
    // the prompt tokens it computes, each decode step the inter-token latency. (A fresh server each time: a
    // prompt sent again is a prefix-cache hit, whose cached tokens the prefill step does not compute.)
    for stream in [false, true] {
        let pooled = InProcess::new(ServerConfig {
            latency: config,
            max_total_tokens: Some(10_000),
            ..ServerConfig::default()
        });
        assert_eq!(
            timed(&pooled, &body(5, 8, stream)).await,
            Duration::from_millis(180),
            "pooled, stream={stream}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn streamed_chunks_arrive_one_inter_token_latency_apart() {
    let latency = LatencyConfig {
        ttft_ms: 50.0,
        itl_ms: 20.0,
        ..LatencyConfig::default()
    };
    chunks_arrive_one_inter_token_latency_apart(with_latency(latency)).await;
    // The batch loop of a bounded pool: a step's time passes before its tokens come out.
    let pooled = InProcess::new(ServerConfig {
        latency,
        max_total_tokens: Some(10_000),
        ..ServerConfig::default()
    });
    chunks_arrive_one_inter_token_latency_apart(pooled).await;
}

async fn chunks_arrive_one_inter_token_latency_apart(server: InProcess) {
    use futures_util::StreamExt;
    let request = axum::http::Request::post("/generate")
        .body(axum::body::Body::from(
            serde_json::to_vec(&body(3, 4, true)).unwrap(),
        ))
        .unwrap();
    let response = tower::ServiceExt::oneshot(mock_server::app(server.state.clone()), request)
        .await
        .unwrap();
    let start = tokio::time::Instant::now();
    let mut stream = response.into_body().into_data_stream();
    let mut arrivals = Vec::new();
    let mut all = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        arrivals.push(start.elapsed().as_millis());
        all.extend_from_slice(&chunk);
    }
    assert_eq!(read_sse(&all).unwrap().len(), 4);
    assert_eq!(
        arrivals,
        [50, 70, 90, 110, 110],
        "4 chunks, then [DONE] at once"
    );
}

#[tokio::test(start_paused = true)]
async fn jitter_is_capped_and_seeded() {
    let config = |seed| LatencyConfig {
        itl_ms: 10.0,
        jitter_ms: 5.0,
        jitter_seed: seed,
        ..LatencyConfig::default()
    };
    let a = timed(&with_latency(config(1)), &body(3, 21, false)).await;
    assert_eq!(
        a,
        timed(&with_latency(config(1)), &body(3, 21, false)).await
    );
    assert_ne!(
        a,
        timed(&with_latency(config(2)), &body(3, 21, false)).await
    );
    // 20 gaps of 10 ms, each moved by at most 5 ms, plus a first-token jitter of at most 5 ms.
    assert!(
        a >= Duration::from_millis(100) && a <= Duration::from_millis(305),
        "{a:?}"
    );
}

#[tokio::test]
async fn metrics_use_sglangs_names_and_count_tokens_and_faults() {
    let server = InProcess::new(ServerConfig {
        enable_metrics: true,
        model_path: "org/model".to_owned(),
        ..ServerConfig::default()
    });
    server.generate(&body(5, 8, false)).await;
    server.generate(&body(3, 4, true)).await;
    server
        .request(
            axum::http::Method::POST,
            "/generate",
            serde_json::to_vec(&body(3, 4, false)).unwrap(),
            &[("x-mock-fault", "missing-logprobs")],
        )
        .await;
    let reply = server.get("/metrics").await;
    assert_eq!(reply.status, 200);
    assert!(reply.content_type().starts_with("text/plain"));
    let text = reply.text();
    let label = r#"{model_name="org/model"}"#;
    for line in [
        format!("sglang:prompt_tokens_total{label} 11.0"),
        format!("sglang:generation_tokens_total{label} 16.0"),
        format!("sglang:num_requests_total{label} 3.0"),
        format!("sglang:num_running_reqs{label} 0.0"),
        format!("sglang:num_queue_reqs{label} 0.0"),
        format!("sglang:time_to_first_token_seconds_count{label} 3.0"),
        format!("sglang:e2e_request_latency_seconds_count{label} 3.0"),
        format!("sglang:inter_token_latency_seconds_count{label} 13.0"),
        r#"sglang:time_to_first_token_seconds_bucket{le="0.001",model_name="org/model"}"#
            .to_owned(),
        r#"sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="org/model"} 3.0"#
            .to_owned(),
        r#"sglang_mock:faults_injected_total{kind="missing-logprobs",model_name="org/model"} 1.0"#
            .to_owned(),
        "# TYPE sglang:time_to_first_token_seconds histogram".to_owned(),
        "# TYPE sglang:prompt_tokens_total counter".to_owned(),
        "# TYPE sglang:num_running_reqs gauge".to_owned(),
    ] {
        assert!(text.contains(&line), "missing {line:?} in\n{text}");
    }
    // Histogram buckets are cumulative.
    let buckets: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("sglang:inter_token_latency_seconds_bucket"))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
}

/// SGLang's `test_metrics.py`, as the SGLang-versions issue ran it: `/metrics` has the scheduler's
/// `token_usage`, `gen_throughput`, `num_grammar_queue_reqs`, `cache_hit_rate` and `spec_accept_length` gauges
/// and the tokenizer's `cached_tokens_total` counter (`srt/observability/metrics_collector.py`; the mock lacked
/// all six). `token_usage` is `num_used_tokens` over the pool of `max_total_num_tokens` that `/server_info`
/// reports (the KV of the running requests' prompts and outputs so far), and throughput over a stretch without
/// generation is 0.
#[tokio::test(start_paused = true)]
async fn metrics_have_the_scheduler_gauges_sglangs_tests_read() {
    let server = InProcess::new(ServerConfig {
        enable_metrics: true,
        model_path: "org/model".to_owned(),
        ..crate::common::slow()
    });
    let label = r#"{model_name="org/model"}"#;
    let value = |text: &str, name: &str| -> f64 {
        let prefix = format!("{name}{label} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {name} sample in\n{text}"))
            .parse()
            .expect("a float")
    };
    let running = crate::common::spawn_generate(&server, body(5, 8, false));
    crate::common::advance_ms(10).await;
    let text = server.get("/metrics").await.text();
    for (name, kind) in [
        ("sglang:token_usage", "gauge"),
        ("sglang:gen_throughput", "gauge"),
        ("sglang:num_grammar_queue_reqs", "gauge"),
        ("sglang:cache_hit_rate", "gauge"),
        ("sglang:spec_accept_length", "gauge"),
        ("sglang:cached_tokens_total", "counter"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} in\n{text}"
        );
    }
    let pool = server.get("/server_info").await.json()["max_total_num_tokens"]
        .as_f64()
        .expect("max_total_num_tokens");
    let used = value(&text, "sglang:num_used_tokens");
    // A token a second, the first at once: 10 ms in, the request holds its 5 prompt tokens and 1 output token.
    assert_eq!(
        used,
        5.0 + 1.0,
        "the running request's prompt and output so far"
    );
    assert_eq!(value(&text, "sglang:token_usage"), used / pool);
    assert_eq!(value(&text, "sglang:num_grammar_queue_reqs"), 0.0);
    crate::common::advance_ms(20_000).await;
    assert_eq!(running.await.unwrap().status, 200);
    let idle = server.get("/metrics").await.text();
    let again = server.get("/metrics").await.text();
    assert_eq!(value(&idle, "sglang:token_usage"), 0.0);
    assert_eq!(
        value(&again, "sglang:gen_throughput"),
        0.0,
        "nothing generated since the last scrape"
    );
}
