//! Criterion benchmarks of `/generate` served in-process (request parsing, generation and JSON encoding,
//! through the axum router without a socket), and of the floor under a whole answer: generating without
//! encoding, and encoding a pre-generated answer, through the same code the server runs.
//!
//! Groups: `generate_1024_logprobs` (the loopback benchmark's request), `floor_1024_logprobs` (its two parts,
//! and the answer's logprobs formatted alone),
//! `generate_16_logprobs` (the short answer a router load test sends) and `stream_512` (one SSE stream of 512
//! tokens, the unit of `bench/load_streams.py`).

use std::hint::black_box;

use axum::body::Body;
use axum::http::Request;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http_body_util::BodyExt;
use mock_server::{AppState, ServerConfig, app};
use tower::ServiceExt;

#[path = "../examples/support/answer.rs"]
mod answer;

use answer::{Answer, request_body};

async fn post(router: axum::Router, body: String) -> usize {
    let request = Request::post("/generate")
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("static request is valid");
    let response = router
        .oneshot(request)
        .await
        .expect("the router is infallible");
    assert!(response.status().is_success());
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("in-memory body")
        .to_bytes();
    bytes.len()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn whole_requests(c: &mut Criterion) {
    let runtime = runtime();
    let router = app(AppState::new(ServerConfig::default()).expect("default config is valid"));
    for (group_name, tokens, stream) in [
        ("generate_1024_logprobs", 1024, false),
        ("generate_16_logprobs", 16, false),
        ("stream_512", 512, true),
    ] {
        let body = request_body(tokens, stream);
        let size = runtime.block_on(post(router.clone(), body.clone()));
        let mut group = c.benchmark_group(group_name);
        group.throughput(Throughput::Elements(1));
        group.bench_function("requests", |b| {
            b.to_async(&runtime)
                .iter(|| async { black_box(post(router.clone(), body.clone()).await) });
        });
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function("response_bytes", |b| {
            b.to_async(&runtime)
                .iter(|| async { black_box(post(router.clone(), body.clone()).await) });
        });
        group.finish();
    }
}

/// The two halves of a 1,024-token answer, each through the server's own code: `generate` runs the plan's
/// step core to its end, `encode` writes the finished run's body; `format_logprobs` is the largest part of
/// `encode` alone.
fn floor(c: &mut Criterion) {
    let answer = Answer::new(1024).expect("the benchmark's request is valid");
    let generate = || answer.generate();
    let run = generate();
    let encode = || answer.encode(&run);
    let size = encode().len();

    // The largest single part of encoding: the answer's 1,024 logprobs in shortest form, alone.
    let logprobs = run
        .generation(0)
        .expect("the benchmark's request runs")
        .output_logprobs()
        .to_vec();
    let format_logprobs = || {
        let mut out = Vec::with_capacity(16 * logprobs.len());
        for &lp in &logprobs {
            out.extend_from_slice(zmij::Buffer::new().format_finite(lp).as_bytes());
        }
        out
    };

    let mut group = c.benchmark_group("floor_1024_logprobs");
    group.throughput(Throughput::Elements(1));
    group.bench_function("generate", |b| b.iter(|| black_box(generate())));
    group.bench_function("encode", |b| b.iter(|| black_box(encode())));
    group.bench_function("format_logprobs", |b| {
        b.iter(|| black_box(format_logprobs()))
    });
    group.throughput(Throughput::Bytes(size as u64));
    group.bench_function("encode_bytes", |b| b.iter(|| black_box(encode())));
    group.finish();
}

criterion_group!(benches, whole_requests, floor);
criterion_main!(benches);
