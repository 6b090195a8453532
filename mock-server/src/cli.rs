//! The `sglang-mock` command line (the `cli` feature): the flags, the `oracle`, `audit` and `releases`
//! subcommands, logging, and the ready line. The server's own flags are [`ServerConfig`]'s fields; this
//! module adds the ones that read files (`--script`, `--faults`) and the one-rule `--fault` shorthand.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use crate::error::ApiError;
use crate::faults::{Fault, FaultConfig, FaultRule, StreamFilter};
use crate::http::Server;
use mock_core::ServerConfig;
use mock_core::oracle::Oracle;
use mock_core::release::{RELEASES, Release, RouteGroup};
use mock_core::{request, wire};

/// A deterministic, wire-faithful SGLang server with exact logprobs from a toy model.
///
/// Once it listens, the server prints one JSON line on stdout, `{"event":"ready","url":"http://HOST:PORT",...}`;
/// logs go to stderr.
#[derive(Debug, Parser)]
#[command(
    name = "sglang-mock",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
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
        file: Option<PathBuf>,
        #[command(flatten)]
        flags: Box<Flags>,
    },
    /// Audit dumped rollouts (JSON lines, or a JSON list) against what a server served: its ledger, read from a
    /// running server (--url, started with --ledger) or from a file saved from its /admin/ledger. Prints the
    /// report; exit status 0 when every sample is faithful, 1 when the audit found problems (an input without
    /// samples, or without a trained token, is one), 2 when it could not run, a sample it cannot read among
    /// them (mock-server/WITNESS.md).
    Audit(AuditArgs),
    /// List the SGLang releases the server answers as, oldest first, one number a line (the last is the
    /// default); with --json, everything in which they differ (mock-server/VERSIONS.md).
    Releases {
        /// Only the releases that serve this group of routes.
        #[arg(long, value_enum)]
        serving: Option<RouteGroup>,
        /// Print each release's whole definition as a JSON list.
        #[arg(long)]
        json: bool,
    },
    /// Record a session: a proxy in front of any SGLang (or router) URL that writes every exchange to a JSON
    /// lines file, exactly (request, status, headers, body bytes, a stream's chunks with their times;
    /// credentials redacted). Prints the ready line; on SIGINT or SIGTERM writes what is in flight and stops.
    Record(RecordArgs),
    /// Serve a recording: each request is answered with the earliest unused recorded exchange whose request is
    /// the same (the body compared as JSON, `rid` ignored); a request with none is a 500 naming the nearest
    /// recorded request. Prints the ready line; at exit, a summary line with the misses and the unused
    /// exchanges, and exit status 1 if any request missed.
    Replay(ReplayArgs),
    /// Send a corpus of requests to a target (a live SGLang URL, or a recording of one) and to the mock under
    /// the same release, and compare what the model and the clock cannot decide (mock-server/CONFORM.md).
    /// Exit status 0 when every difference is in the documented list, 1 otherwise, 2 when it could not run.
    Conform(Box<ConformArgs>),
}

/// Where `record` and `replay` listen.
#[derive(Debug, clap::Args)]
struct Listen {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port (the ready line says which).
    #[arg(long, default_value_t = 30000)]
    port: u16,
}

/// The `record` subcommand's arguments.
#[derive(Debug, clap::Args)]
struct RecordArgs {
    /// The server to record, such as http://127.0.0.1:30000.
    #[arg(long)]
    upstream: String,
    /// The recording file (replaced if it exists).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    listen: Listen,
}

/// The `replay` subcommand's arguments.
#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The recording, written by `record` (or by `conform --record`).
    file: PathBuf,
    #[command(flatten)]
    listen: Listen,
    /// 1 sends a stream's chunks at the recorded times, 2 twice as fast, 0 at once.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// A top-level body field left out of the match (repeatable); the default is `rid`.
    #[arg(long = "ignore", default_values_t = ["rid".to_owned()])]
    ignore: Vec<String>,
}

/// The `conform` subcommand's arguments; the mock's own flags (`--tokenizer`, `--context-length`, ...) follow
/// as for the server.
#[derive(Debug, clap::Args)]
struct ConformArgs {
    /// A live server's URL (http://...) or a recording file.
    #[arg(long)]
    against: String,
    /// The corpus (mock-server/conform/corpus.json's format); the built-in one by default.
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// The documented differences; the built-in list (mock-server/conform/known.json) by default.
    #[arg(long)]
    known: Option<PathBuf>,
    /// The target serves a mixture-of-experts model with routed experts: send the corpus's MoE cases.
    #[arg(long)]
    moe: bool,
    /// Also record the live target's answers to this file (a golden recording).
    #[arg(long)]
    record: Option<PathBuf>,
    /// Seconds one answer may take.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// The report as text (one line per difference class) or as JSON.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
    #[command(flatten)]
    flags: Flags,
}

/// The `audit` subcommand's arguments.
#[derive(Debug, clap::Args)]
struct AuditArgs {
    /// The samples; `-` or nothing reads stdin.
    samples: Option<PathBuf>,
    /// A running server's base URL: its ledger is read from URL/admin/ledger.
    #[arg(long, required_unless_present = "ledger", conflicts_with = "ledger")]
    url: Option<String>,
    /// A ledger saved from a server's /admin/ledger.
    #[arg(long)]
    ledger: Option<PathBuf>,
    /// The key a server with --api-key or --admin-api-key asks for on /admin/*.
    #[arg(long, env = "SGLANG_MOCK_ADMIN_API_KEY")]
    api_key: Option<String>,
    /// The samples' layout (slime, verl, areal-response, areal-trajectory, generic); by default each sample's
    /// keys tell.
    #[arg(long)]
    layout: Option<String>,
    /// Generated tokens with loss mask 0 are deliberate (off-policy masking, an overlong filter).
    #[arg(long)]
    allow_masked_generated: bool,
    /// The report as text (the default) or as JSON.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

/// Every flag: the server's configuration and the ones that build its scripted answers and fault schedule.
#[derive(Debug, clap::Args)]
pub struct Flags {
    #[command(flatten)]
    server: ServerConfig,
    /// The batch latency model's coefficients fitted to a model on a GPU (the latency flags given explicitly
    /// win); takes effect with a batch loop (--max-total-tokens or --clock logical).
    #[arg(long, env = "SGLANG_MOCK_LATENCY_PROFILE", value_enum)]
    latency_profile: Option<mock_core::LatencyProfile>,
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
    /// The configuration these flags describe, with the script and fault files read.
    pub fn into_config(self) -> anyhow::Result<ServerConfig> {
        let mut config = self.server;
        if let Some(profile) = self.latency_profile {
            config.latency = profile.apply(config.latency);
        }
        if let Some(path) = &self.script {
            config.scripted = mock_core::ScriptRule::load(path)?;
        }
        if let Some(path) = &self.faults {
            let bytes = std::fs::read(path)
                .with_context(|| format!("cannot read the fault file {path}"))?;
            config.faults = FaultConfig::from_json(&bytes)
                .with_context(|| format!("the fault file {path} is not valid"))?;
        }
        if let Some(seed) = self.fault_seed {
            config.faults.seed = seed;
        }
        if let Some(fault) = self.fault {
            config.faults.rules.push(FaultRule {
                rate: self.fault_rate,
                first: self.fault_first,
                every: self.fault_every,
                window_ms: self.fault_window_ms,
                endpoint: self.fault_endpoint,
                stream: self.fault_stream,
                ..FaultRule::new(fault)
            });
        }
        config
            .faults
            .validate()
            .context("the --fault flags are not valid")?;
        Ok(config)
    }
}

/// The line the binary prints on stdout once it listens: one JSON object with `"event": "ready"`, the base
/// `url`, the bound `host` and `port`, and the process id.
pub fn ready_line(server: &Server) -> String {
    ready_line_at(server.addr())
}

/// The ready line of whatever listens at `addr` (the server, `record`, `replay`).
fn ready_line_at(addr: std::net::SocketAddr) -> String {
    serde_json::json!({
        "event": "ready",
        "url": format!("http://{addr}"),
        "host": addr.ip().to_string(),
        "port": addr.port(),
        "pid": std::process::id(),
    })
    .to_string()
}

/// The binary: parse the command line, then serve until SIGINT or SIGTERM, or answer one `oracle` body.
pub fn main() -> ExitCode {
    init_tracing();
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => return fail(&anyhow::Error::new(err).context("cannot start the runtime")),
    };
    let result = match cli.command {
        Some(Command::Oracle { file, flags }) => runtime.block_on(oracle(*flags, file.as_deref())),
        Some(Command::Audit(args)) => {
            return audit(args).unwrap_or_else(|err| {
                eprintln!("Error: {err:?}");
                ExitCode::from(2)
            });
        }
        Some(Command::Releases { serving, json }) => releases(serving, json),
        Some(Command::Record(args)) => runtime.block_on(record(args)),
        Some(Command::Replay(args)) => runtime.block_on(replay(args)),
        Some(Command::Conform(args)) => {
            // The mock answers as the target's release unless --sglang-version (or its variable) says which.
            let release_given = matches
                .subcommand_matches("conform")
                .and_then(|m| m.value_source("sglang_version"))
                .is_some_and(|source| source != clap::parser::ValueSource::DefaultValue);
            return runtime
                .block_on(conform(*args, release_given))
                .unwrap_or_else(|err| {
                    eprintln!("Error: {err:?}");
                    ExitCode::from(2)
                });
        }
        None => runtime
            .block_on(serve(cli.flags))
            .map(|()| ExitCode::SUCCESS),
    };
    result.unwrap_or_else(|err| fail(&err))
}

/// `sglang-mock releases`: the one list of releases, for scripts and for people.
fn releases(serving: Option<RouteGroup>, json: bool) -> anyhow::Result<ExitCode> {
    let chosen: Vec<&Release> = RELEASES
        .iter()
        .filter(|r| serving.is_none_or(|group| r.serves(group)))
        .collect();
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &chosen)?;
        writeln!(out)?;
    } else {
        for release in chosen {
            writeln!(out, "{}", release.number)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn fail(err: &anyhow::Error) -> ExitCode {
    eprintln!("Error: {err:?}");
    ExitCode::FAILURE
}

fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        // Logs go to stderr, coloured only on a terminal, so redirected logs stay plain text.
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Prints one line on stdout and flushes it.
fn print_line(line: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .context("cannot write to stdout")
}

async fn serve(flags: Flags) -> anyhow::Result<()> {
    let server = Server::start(flags.into_config()?).await?;
    print_line(&ready_line(&server))?;
    server
        .run_until(shutdown_signal())
        .await
        .context("server failed")
}

/// `sglang-mock record`: proxy and record until SIGINT or SIGTERM.
async fn record(args: RecordArgs) -> anyhow::Result<ExitCode> {
    use crate::judge::{RecordOptions, Recorder};
    let recorder = Recorder::start(RecordOptions {
        upstream: args.upstream,
        out: args.out.clone(),
        host: args.listen.host,
        port: args.listen.port,
    })
    .await?;
    print_line(&ready_line_at(recorder.addr()))?;
    let written = recorder
        .run_until(shutdown_signal())
        .await
        .context("the recorder failed")?;
    print_line(
        &serde_json::json!({"event": "recorded", "exchanges": written, "out": args.out})
            .to_string(),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `sglang-mock replay`: serve a recording until SIGINT or SIGTERM; exit 1 if a request missed.
async fn replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    use crate::judge::{Recording, Replay, ReplayOptions};
    anyhow::ensure!(
        args.speed.is_finite() && args.speed >= 0.0,
        "--speed {} is not a number of 0 or more",
        args.speed
    );
    let recording = Recording::read(&args.file)?;
    let replay = Replay::start(
        recording,
        ReplayOptions {
            host: args.listen.host,
            port: args.listen.port,
            speed: args.speed,
            ignore: args.ignore,
        },
    )
    .await?;
    print_line(&ready_line_at(replay.addr()))?;
    let report = replay
        .run_until(shutdown_signal())
        .await
        .context("the replay failed")?;
    let mut line = serde_json::to_value(&report)?;
    if let Some(map) = line.as_object_mut() {
        map.insert("event".into(), "replayed".into());
    }
    print_line(&line.to_string())?;
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `sglang-mock conform`: the report; exit 0 when every difference is documented, 1 otherwise.
async fn conform(args: ConformArgs, release_given: bool) -> anyhow::Result<ExitCode> {
    use crate::judge::conform::{ConformOptions, Target, conform, load_corpus, load_known};
    use crate::judge::corpus::ModelKind;
    let corpus = load_corpus(args.corpus.as_deref()).map_err(anyhow::Error::msg)?;
    let known = load_known(args.known.as_deref()).map_err(anyhow::Error::msg)?;
    let mock = args.flags.into_config()?;
    let release = release_given.then(|| mock.sglang_version.to_string());
    let report = conform(ConformOptions {
        target: Target::parse(&args.against),
        mock,
        release,
        corpus,
        known,
        model: if args.moe {
            ModelKind::Moe
        } else {
            ModelKind::Dense
        },
        record: args.record,
        timeout: std::time::Duration::from_secs(args.timeout_s),
    })
    .await?;
    let printed = match args.format.as_str() {
        "json" => serde_json::to_string(&report)? + "\n",
        _ => report.text(),
    };
    print_report(&printed, report.ok())
}

/// Prints a report (`audit`'s, `conform`'s); exit status 0 when it found nothing wrong, 1 otherwise.
fn print_report(printed: &str, ok: bool) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(printed.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write the report")?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
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

/// `sglang-mock oracle`: print the answer to one body; exit 0 for an HTTP 200 answer, 1 otherwise.
async fn oracle(flags: Flags, file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let body = match file {
        Some(path) if path != Path::new("-") => std::fs::read(path)
            .with_context(|| format!("cannot read the request body {}", path.display()))?,
        _ => {
            let mut body = Vec::new();
            std::io::stdin()
                .read_to_end(&mut body)
                .context("cannot read the request body from stdin")?;
            body
        }
    };
    let oracle = Oracle::new(flags.into_config()?).context("the flags do not build a model")?;
    let printed = print_answer(&oracle, &body);
    if printed.status != 200 {
        eprintln!("HTTP {}", printed.status);
    }
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&printed.bytes)
        .and_then(|()| stdout.flush())
        .context("cannot write the answer")?;
    Ok(if printed.status == 200 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What `sglang-mock oracle` prints for one body: the HTTP status and the bytes of the answer.
struct Printed {
    /// 200, or the status of the error the server answers with.
    status: u16,
    /// A 200 non-stream answer is its JSON body and a newline; a 200 stream is its SSE events through
    /// `data: [DONE]`; an error is its JSON error body (or `Internal Server Error`) and a newline.
    bytes: Vec<u8>,
}

/// The answer to `body` as the `oracle` command prints it (see [`Printed`]). A body that parses and asks for a
/// stream is answered with the stream's events: a value error in a stream is an event of a 200 answer. An
/// error is answered as the server answers it ([`ApiError`]'s status and body).
fn print_answer(oracle: &Oracle, body: &[u8]) -> Printed {
    let streamed = request::parse_generate(body).is_ok_and(|req| req.stream);
    let answer = if streamed {
        oracle.expect_stream(body).map(|events| {
            let mut out = Vec::new();
            for event in events {
                out.extend_from_slice(&wire::sse_event(event.to_string().as_bytes()));
            }
            out.extend_from_slice(wire::DONE_EVENT);
            out
        })
    } else {
        oracle.expect(body).map(|expected| {
            let mut out = expected.body.to_string().into_bytes();
            out.push(b'\n');
            out
        })
    };
    match answer {
        Ok(bytes) => Printed { status: 200, bytes },
        Err(err) => {
            let err = ApiError::from(err);
            let mut bytes = err
                .json_body()
                .unwrap_or_else(|| b"Internal Server Error".to_vec());
            bytes.push(b'\n');
            Printed {
                status: err.status(),
                bytes,
            }
        }
    }
}

/// `sglang-mock audit`: the report of the samples against a ledger; exit 0 when faithful, 1 with problems.
fn audit(args: AuditArgs) -> anyhow::Result<ExitCode> {
    use mock_core::witness::{AuditOptions, Layout, Records, audit, parse_samples};

    let ledger = match (&args.url, &args.ledger) {
        (Some(url), _) => get(url, "/admin/ledger", args.api_key.as_deref())
            .with_context(|| format!("cannot read the ledger of {url}"))?,
        (None, Some(path)) => std::fs::read(path)
            .with_context(|| format!("cannot read the ledger {}", path.display()))?,
        (None, None) => {
            anyhow::bail!("give the ledger: --url of a running server or --ledger FILE")
        }
    };
    let records =
        Records::from_dump(&ledger).context("the ledger is not a dump of /admin/ledger")?;
    let samples = match &args.samples {
        Some(path) if path != Path::new("-") => std::fs::read(path)
            .with_context(|| format!("cannot read the samples {}", path.display()))?,
        _ => {
            let mut body = Vec::new();
            std::io::stdin()
                .read_to_end(&mut body)
                .context("cannot read the samples from stdin")?;
            body
        }
    };
    let layout = args
        .layout
        .as_deref()
        .map(|name| {
            Layout::ALL
                .into_iter()
                .find(|l| l.name() == name)
                .with_context(|| {
                    let names: Vec<&str> = Layout::ALL.iter().map(|l| l.name()).collect();
                    format!("--layout {name:?}: expected one of {}", names.join(", "))
                })
        })
        .transpose()?;
    let batch = parse_samples(&samples, layout).context("cannot read the samples")?;
    let mut options = batch.options.unwrap_or(AuditOptions::default());
    options.allow_masked_generated |= args.allow_masked_generated;
    // A saved ledger does not hold the model: the audit goes without a re-score's evidence.
    let report = audit(&records, &batch.samples, &options, None);
    let printed = match args.format.as_str() {
        "json" => serde_json::to_string(&report).context("cannot write the report")? + "\n",
        _ => report.text(),
    };
    print_report(&printed, report.ok)
}

/// The body of `GET {base}{path}` from a server on plain HTTP: one HTTP/1.0 exchange, which the server answers
/// and closes, so that the command needs no HTTP client library.
fn get(base: &str, path: &str, api_key: Option<&str>) -> anyhow::Result<Vec<u8>> {
    use std::net::TcpStream;

    let authority = base
        .strip_prefix("http://")
        .with_context(|| format!("{base:?} is not an http:// URL"))?
        .trim_end_matches('/');
    let mut stream =
        TcpStream::connect(authority).with_context(|| format!("cannot connect to {authority}"))?;
    let auth = api_key
        .map(|key| format!("Authorization: Bearer {key}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\n{auth}\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("the answer has no end of headers")?;
    let head = String::from_utf8_lossy(&response[..split]);
    let body = response[split + 4..].to_vec();
    let status = head.split(' ').nth(1).unwrap_or("");
    if status != "200" {
        anyhow::bail!(
            "GET {path} answered {}: {}",
            head.lines().next().unwrap_or(""),
            String::from_utf8_lossy(&body)
        );
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latency_profile_fills_the_coefficients_not_given() {
        let args = [
            "sglang-mock",
            "--latency-profile",
            "llama-3.3-70b-fp8-2xh100",
            "--itl-ms",
            "5",
        ];
        let cli = Cli::try_parse_from(args).expect("valid flags");
        let latency = cli.flags.into_config().expect("a valid config").latency;
        let profile = mock_core::LatencyProfile::Llama33_70bFp8TwoH100;
        let (ttft, per_token, _, per_sample) = profile.coefficients();
        let got = (
            latency.ttft_ms,
            latency.ttft_per_token_ms,
            latency.itl_ms,
            latency.itl_per_sample_ms,
        );
        assert_eq!(got, (ttft, per_token, 5.0, per_sample));
    }
}
