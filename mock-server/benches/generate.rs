//! Criterion benchmark of a whole `/generate` call served in-process: request parsing, generation of 1,024
//! tokens with logprobs, and JSON encoding, through the axum router without a socket.

use std::hint::black_box;

use axum::body::Body;
use axum::http::Request;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http_body_util::BodyExt;
use mock_server::{AppState, ServerConfig, app};
use tower::ServiceExt;

const BODY: &str = r#"{"input_ids":[785,6722,315,9625,374],"sampling_params":{"max_new_tokens":1024,"ignore_eos":true,"temperature":1.0},"return_logprob":true}"#;

async fn generate(router: axum::Router) -> usize {
    let request = Request::post("/generate")
        .header("content-type", "application/json")
        .body(Body::from(BODY))
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

fn in_process(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let router = app(AppState::new(ServerConfig::default()).expect("default config is valid"));
    let size = runtime.block_on(generate(router.clone()));

    let mut group = c.benchmark_group("generate_1024_logprobs");
    group.throughput(Throughput::Elements(1));
    group.bench_function("requests", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(generate(router.clone()).await) });
    });
    group.throughput(Throughput::Bytes(size as u64));
    group.bench_function("response_bytes", |b| {
        b.to_async(&runtime)
            .iter(|| async { black_box(generate(router.clone()).await) });
    });
    group.finish();
}

criterion_group!(benches, in_process);
criterion_main!(benches);
