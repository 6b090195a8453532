//! `sglang-mock`: flags to [`ServerConfig`], tracing, bind, [`mock_server::run`] until SIGINT or SIGTERM.

use anyhow::Context;
use clap::Parser;
use mock_server::config::{DEFAULT_MAX_BODY_BYTES, DEFAULT_MODEL_PATH};
use mock_server::{Profile, ServerConfig};

/// A deterministic, wire-faithful SGLang server with exact logprobs from a toy model.
#[derive(Debug, Parser)]
#[command(name = "sglang-mock", version, about)]
struct Flags {
    /// Address to listen on.
    #[arg(long, env = "SGLANG_MOCK_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free port; the chosen address is logged).
    #[arg(long, env = "SGLANG_MOCK_PORT", default_value_t = 30000)]
    port: u16,
    /// Seed of the toy model: same seed and request give the same bytes.
    #[arg(long, env = "SGLANG_MOCK_SEED", default_value_t = 0)]
    seed: u64,
    /// Model path reported by /model_info and /server_info.
    #[arg(long, env = "SGLANG_MOCK_MODEL_PATH", default_value = DEFAULT_MODEL_PATH)]
    model_path: String,
    /// Name reported by /v1/models (defaults to the model path).
    #[arg(long, env = "SGLANG_MOCK_SERVED_MODEL_NAME")]
    served_model_name: Option<String>,
    /// Vocabulary size of the toy model.
    #[arg(long, env = "SGLANG_MOCK_VOCAB_SIZE", default_value_t = 151_936)]
    vocab_size: u32,
    /// Context length: maximum prompt plus completion tokens.
    #[arg(long, env = "SGLANG_MOCK_CONTEXT_LENGTH", default_value_t = 32_768)]
    context_length: u32,
    /// Require `Authorization: Bearer <key>` on every endpoint except /health*.
    #[arg(long, env = "SGLANG_MOCK_API_KEY")]
    api_key: Option<String>,
    /// Stream text, output_ids and output logprobs as deltas instead of cumulatively.
    #[arg(long, env = "SGLANG_MOCK_INCREMENTAL_STREAMING_OUTPUT")]
    incremental_streaming_output: bool,
    /// SGLang version to imitate: `latest` or `mid` (v0.5.x).
    #[arg(long, env = "SGLANG_MOCK_PROFILE", default_value = "latest")]
    profile: Profile,
    /// Emit a stream chunk every this many tokens (requests may override it).
    #[arg(long, env = "SGLANG_MOCK_STREAM_INTERVAL", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    stream_interval: u32,
    /// Report logprobs of the untempered (T = 1) distribution.
    #[arg(long, env = "SGLANG_MOCK_RETURN_ORIGINAL_LOGPROB")]
    return_original_logprob: bool,
    /// Largest accepted request body in bytes.
    #[arg(long, env = "SGLANG_MOCK_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: usize,
}

impl Flags {
    fn into_config(self) -> ServerConfig {
        ServerConfig {
            host: self.host,
            port: self.port,
            seed: self.seed,
            model_path: self.model_path,
            served_model_name: self.served_model_name,
            vocab_size: self.vocab_size,
            context_length: self.context_length,
            api_key: self.api_key,
            incremental_streaming_output: self.incremental_streaming_output,
            profile: self.profile,
            stream_interval: self.stream_interval,
            return_original_logprob: self.return_original_logprob,
            max_body_bytes: self.max_body_bytes,
        }
    }
}

/// Resolves on the first SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(%err, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sig) => {
                sig.recv().await;
            }
            Err(err) => {
                tracing::error!(%err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut config = Flags::parse().into_config();
    let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port))
        .await
        .with_context(|| format!("cannot bind {}:{}", config.host, config.port))?;
    config.port = listener.local_addr()?.port();
    mock_server::run(listener, config, shutdown_signal())
        .await
        .context("server failed")
}
