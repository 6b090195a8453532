//! Serves fixed `/generate` requests in-process through the router, for profiling the whole request path
//! (parsing, generation, encoding) with `perf` or callgrind:
//! `cargo run --release --example generate_profile -- [TOKENS] [REQUESTS]` (1,024 tokens, 200 requests by default).

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use mock_server::{AppState, ServerConfig, app};
use tower::ServiceExt;

#[path = "support/answer.rs"]
#[allow(dead_code)]
mod answer;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let router = app(AppState::new(ServerConfig::default()).expect("default config is valid"));
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u32>());
    let tokens = args.next().and_then(Result::ok).unwrap_or(1024);
    let requests = args.next().and_then(Result::ok).unwrap_or(200);
    let body = answer::request_body(tokens, false);
    let started = std::time::Instant::now();
    let mut bytes = 0;
    for _ in 0..requests {
        let request = Request::post("/generate")
            .header("content-type", "application/json")
            .body(Body::from(body.clone()))
            .expect("static request is valid");
        let response = router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        bytes += response
            .into_body()
            .collect()
            .await
            .expect("in-memory body")
            .to_bytes()
            .len();
    }
    let per_request = started.elapsed() / requests;
    println!("{requests} requests, {bytes} bytes, {per_request:?} per request");
}
