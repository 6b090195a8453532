//! Serves fixed `/generate` requests in-process through the router, for profiling the whole request path
//! (parsing, generation, encoding) with `perf` or callgrind: `cargo run --release --example generate_profile`.

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use mock_server::{AppState, ServerConfig, app};
use tower::ServiceExt;

const BODY: &str = r#"{"input_ids":[785,6722,315,9625,374],"sampling_params":{"max_new_tokens":1024,"ignore_eos":true,"temperature":1.0},"return_logprob":true}"#;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let router = app(AppState::new(ServerConfig::default()).expect("default config is valid"));
    let requests = 200;
    let started = std::time::Instant::now();
    let mut bytes = 0;
    for _ in 0..requests {
        let request = Request::post("/generate")
            .header("content-type", "application/json")
            .body(Body::from(BODY))
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
