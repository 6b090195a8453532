//! `sglang-mock`: flags to [`ServerConfig`], tracing, bind, [`mock_server::run`] until SIGINT or SIGTERM.

use anyhow::Context;
use clap::Parser;
use mock_server::config::{DEFAULT_MAX_BODY_BYTES, DEFAULT_MODEL_PATH, DEFAULT_WEIGHT_VERSION};
use mock_server::wire;
use mock_server::{
    Fault, FaultConfig, FaultRule, LatencyConfig, Profile, ServerConfig, StreamFilter,
};

/// A deterministic, wire-faithful SGLang server with exact logprobs from a toy model.
#[derive(Debug, Parser)]
#[command(
    name = "sglang-mock",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    flags: Flags,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print the answer the server gives to one /generate body, without a server: the body is read from FILE
    /// (or stdin), the server flags are the same. A streamed request prints the SSE events. Timing fields are
    /// 0.0 and ids the server would generate read `"<fresh uuid4 hex>"`. Exit status 0 for an HTTP 200 answer,
    /// 1 otherwise (the status goes to stderr, the error body to stdout).
    Oracle {
        /// The request body; `-` or nothing reads stdin.
        file: Option<std::path::PathBuf>,
        #[command(flatten)]
        flags: Flags,
    },
}

#[derive(Debug, clap::Args)]
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
    /// The weight_version reported until a weight update changes it.
    #[arg(long, env = "SGLANG_MOCK_WEIGHT_VERSION", default_value = DEFAULT_WEIGHT_VERSION)]
    weight_version: String,
    /// Simulated duration of a weight update, in milliseconds.
    #[arg(long, env = "SGLANG_MOCK_WEIGHT_UPDATE_MS", default_value_t = 0)]
    weight_update_ms: u64,
    /// Most requests generating at once; more wait in the queue (SGLang's --max-running-requests).
    #[arg(long, env = "SGLANG_MOCK_MAX_RUNNING_REQUESTS")]
    max_running_requests: Option<usize>,
    /// Most requests waiting at once; more get a 503 (SGLang's --max-queued-requests).
    #[arg(long, env = "SGLANG_MOCK_MAX_QUEUED_REQUESTS")]
    max_queued_requests: Option<usize>,
    /// Scripted answers: a JSON list of {"prompt_contains", "answer", "finish_reason"} rules.
    #[arg(long, env = "SGLANG_MOCK_SCRIPT")]
    script: Option<String>,
    /// Fault schedule file: {"seed": N, "rules": [{"fault": "kind;param=value", "rate", "first", "every",
    /// "window_ms", "endpoint", "stream"}]}.
    #[arg(long, env = "SGLANG_MOCK_FAULTS")]
    faults: Option<String>,
    /// One more scheduled fault rule, `kind;param=value...`; the --fault-* flags below qualify it.
    #[arg(long, env = "SGLANG_MOCK_FAULT")]
    fault: Option<Fault>,
    /// Probability that the --fault rule fires on a matching request (seeded, see --fault-seed).
    #[arg(long, env = "SGLANG_MOCK_FAULT_RATE")]
    fault_rate: Option<f64>,
    /// Seed of the fault schedule's draws (replaces the file's seed when given).
    #[arg(long, env = "SGLANG_MOCK_FAULT_SEED")]
    fault_seed: Option<u64>,
    /// The --fault rule fires on the first N matching requests only.
    #[arg(long, env = "SGLANG_MOCK_FAULT_FIRST")]
    fault_first: Option<u64>,
    /// The --fault rule fires on every k-th matching request.
    #[arg(long, env = "SGLANG_MOCK_FAULT_EVERY")]
    fault_every: Option<u64>,
    /// The --fault rule fires only between these offsets from start-up, `START_MS..END_MS`.
    #[arg(long, env = "SGLANG_MOCK_FAULT_WINDOW_MS", value_parser = parse_window)]
    fault_window_ms: Option<(u64, u64)>,
    /// The path the --fault rule applies to (default /generate).
    #[arg(long, env = "SGLANG_MOCK_FAULT_ENDPOINT")]
    fault_endpoint: Option<String>,
    /// The --fault rule applies to `stream` or `nonstream` requests only.
    #[arg(long, env = "SGLANG_MOCK_FAULT_STREAM", value_parser = parse_stream_filter)]
    fault_stream: Option<StreamFilter>,
    /// Simulated time to first token, constant part (ms).
    #[arg(long, env = "SGLANG_MOCK_TTFT_MS", default_value_t = 0.0)]
    ttft_ms: f64,
    /// Simulated time to first token per prompt token (ms).
    #[arg(long, env = "SGLANG_MOCK_TTFT_PER_TOKEN_MS", default_value_t = 0.0)]
    ttft_per_token_ms: f64,
    /// Simulated inter-token latency (ms).
    #[arg(long, env = "SGLANG_MOCK_ITL_MS", default_value_t = 0.0)]
    itl_ms: f64,
    /// Largest jitter added to or removed from each delay (ms).
    #[arg(long, env = "SGLANG_MOCK_JITTER_MS", default_value_t = 0.0)]
    jitter_ms: f64,
    /// Seed of the latency jitter.
    #[arg(long, env = "SGLANG_MOCK_JITTER_SEED", default_value_t = 0)]
    jitter_seed: u64,
    /// Multiplies every simulated delay.
    #[arg(long, env = "SGLANG_MOCK_TIME_SCALE", default_value_t = 1.0)]
    time_scale: f64,
}

fn parse_window(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("expected START_MS..END_MS, got {s:?}"))?;
    let num = |x: &str| {
        x.trim()
            .parse::<u64>()
            .map_err(|e| format!("{x:?} in {s:?}: {e}"))
    };
    Ok((num(a)?, num(b)?))
}

fn parse_stream_filter(s: &str) -> Result<StreamFilter, String> {
    match s {
        "stream" => Ok(StreamFilter::Stream),
        "nonstream" => Ok(StreamFilter::NonStream),
        _ => Err(format!("expected stream or nonstream, got {s:?}")),
    }
}

impl Flags {
    fn into_config(self) -> anyhow::Result<ServerConfig> {
        let scripted = match &self.script {
            Some(path) => mock_server::script::load_rules(path)?,
            None => Vec::new(),
        };
        let mut faults = match &self.faults {
            Some(path) => {
                let bytes = std::fs::read(path)
                    .with_context(|| format!("cannot read the fault file {path}"))?;
                FaultConfig::from_json(&bytes)
                    .with_context(|| format!("the fault file {path} is not valid"))?
            }
            None => FaultConfig::default(),
        };
        if let Some(seed) = self.fault_seed {
            faults.seed = seed;
        }
        if let Some(fault) = self.fault {
            faults.rules.push(FaultRule {
                rate: self.fault_rate,
                first: self.fault_first,
                every: self.fault_every,
                window_ms: self.fault_window_ms,
                endpoint: self.fault_endpoint,
                stream: self.fault_stream,
                ..FaultRule::new(fault)
            });
        }
        faults
            .validate()
            .context("the --fault flags are not valid")?;
        Ok(ServerConfig {
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
            weight_version: self.weight_version,
            scripted,
            faults,
            latency: LatencyConfig {
                ttft_ms: self.ttft_ms,
                ttft_per_token_ms: self.ttft_per_token_ms,
                itl_ms: self.itl_ms,
                jitter_ms: self.jitter_ms,
                jitter_seed: self.jitter_seed,
                time_scale: self.time_scale,
            },
            max_running_requests: self.max_running_requests,
            max_queued_requests: self.max_queued_requests,
            weight_update_ms: self.weight_update_ms,
        })
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

/// `sglang-mock oracle`: print the answer to one body; returns its HTTP status.
async fn oracle(config: ServerConfig, file: Option<std::path::PathBuf>) -> anyhow::Result<u16> {
    use std::io::{Read, Write};

    let body = match file.as_deref() {
        Some(path) if path != std::path::Path::new("-") => std::fs::read(path)
            .with_context(|| format!("cannot read the request body {}", path.display()))?,
        _ => {
            let mut body = Vec::new();
            std::io::stdin()
                .read_to_end(&mut body)
                .context("cannot read the request body from stdin")?;
            body
        }
    };
    let oracle = mock_server::Oracle::new(config).context("the flags do not build a model")?;
    // A body that parses asks for a stream or not; a value error in a stream is an event of a 200 answer.
    let streamed = mock_server::request::parse_generate(&body).is_ok_and(|req| req.stream);
    let answer = if streamed {
        oracle.expect_stream(&body).map(|events| {
            let mut out = Vec::new();
            for event in events {
                out.extend_from_slice(&wire::sse_event(event.to_string().as_bytes()));
            }
            out.extend_from_slice(wire::DONE_EVENT);
            out
        })
    } else {
        oracle.expect(&body).map(|expected| {
            let mut out = expected.body.to_string().into_bytes();
            out.push(b'\n');
            out
        })
    };
    let (status, out) = match answer {
        Ok(out) => (200, out),
        Err(err) => {
            let status = err.status();
            let mut out = err
                .json_body()
                .unwrap_or_else(|| b"Internal Server Error".to_vec());
            out.push(b'\n');
            (status, out)
        }
    };
    if status != 200 {
        eprintln!("HTTP {status}");
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out).context("cannot write the answer")?;
    stdout.flush().context("cannot write the answer")?;
    Ok(status)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        // Logs go to stderr, coloured only on a terminal, so redirected logs stay plain text.
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    if let Some(Command::Oracle { file, flags }) = cli.command {
        let config = flags.into_config()?;
        let status = oracle(config, file).await?;
        std::process::exit(if status == 200 { 0 } else { 1 });
    }
    let mut config = cli.flags.into_config()?;
    let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port))
        .await
        .with_context(|| format!("cannot bind {}:{}", config.host, config.port))?;
    config.port = listener.local_addr()?.port();
    mock_server::run(listener, config, shutdown_signal())
        .await
        .context("server failed")
}
