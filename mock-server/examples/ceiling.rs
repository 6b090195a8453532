//! The ceiling of the loopback benchmark: the same axum and tokio stack as `sglang-mock`, answering every
//! `POST /generate` with a pre-built body read from a file, so it measures HTTP and copying alone.
//!
//! `cargo run --release --example ceiling -- --port 30002 --body response.json` (see `bench/loopback.py`).

use std::path::PathBuf;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::routing::{get, post};
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 30002)]
    port: u16,
    /// The body to answer every /generate with.
    #[arg(long)]
    body: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let body = Bytes::from(
        std::fs::read(&args.body).with_context(|| format!("reading {}", args.body.display()))?,
    );
    let app = Router::new().route("/health", get(|| async {})).route(
        "/generate",
        post(move |_request: Bytes| {
            let body = body.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
