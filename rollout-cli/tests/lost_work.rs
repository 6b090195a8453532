//! A long rollout loses no finished work: each group is appended as it finishes, SIGINT and SIGTERM stop
//! the run cleanly (its requests aborted on the server, exit 130 or 143), SIGKILL leaves whole groups,
//! `--resume` completes a stopped run to the uninterrupted result, a dead server fails the command, and
//! retries are logged in summary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use clap::Parser;
use mock_server::{LatencyConfig, Server, ServerConfig};
use rollout_cli::command::{self, RolloutArgs};
use rollout_cli::run::PromptFormat;
use rollout_client::Sample;
use rollout_client::sample::read_jsonl;

const N: usize = 4;

/// A mock slow enough that a run is mid-flight for seconds: 20 ms between tokens, 64 tokens a sample.
async fn slow_mock() -> Server {
    mock(LatencyConfig {
        itl_ms: 20.0,
        ..LatencyConfig::default()
    })
    .await
}

/// The same model without latency, which gives the same samples: for the resumed and the reference runs.
async fn fast_mock() -> Server {
    mock(LatencyConfig::default()).await
}

async fn mock(latency: LatencyConfig) -> Server {
    Server::start(ServerConfig {
        port: 0,
        latency,
        // The SIGTERM test reads the abort counter.
        enable_metrics: true,
        ..ServerConfig::default()
    })
    .await
    .expect("mock starts")
}

fn temp_path(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "rollout-cli-lost-work-{}-{name}",
        std::process::id()
    ));
    std::fs::remove_file(&path).ok();
    path
}

/// The flags of the run, against `url`, writing `output`.
fn flags(url: &str, output: &Path) -> Vec<String> {
    flags_with(url, output, 64, 2)
}

fn flags_with(url: &str, output: &Path, max_new_tokens: u32, concurrency: usize) -> Vec<String> {
    [
        "--url",
        url,
        "-n",
        &N.to_string(),
        "--concurrency",
        &concurrency.to_string(),
        "--max-new-tokens",
        &max_new_tokens.to_string(),
        "--seed",
        "0",
        "--no-progress",
        "--output",
        output.to_str().unwrap(),
    ]
    .map(str::to_owned)
    .to_vec()
}

fn spawn_rollout(args: &[String]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_rollout"))
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the rollout binary runs")
}

fn samples_in(path: &Path) -> Vec<Sample> {
    let file = std::fs::File::open(path).expect("the output exists");
    read_jsonl(std::io::BufReader::new(file)).expect("every line is a valid sample")
}

/// Waits until `path` holds at least one whole group, while the run goes on.
async fn wait_for_a_group(path: &Path) {
    for _ in 0..600 {
        let lines = std::fs::read(path)
            .map(|b| b.iter().filter(|&&c| c == b'\n').count())
            .unwrap_or(0);
        if lines >= N {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no group was written to {}", path.display());
}

/// Starts the run against a slow mock, writing `name`, and returns once a group is in the output.
async fn run_until_a_group(name: &str) -> (Server, PathBuf, Child) {
    let server = slow_mock().await;
    let output = temp_path(name);
    let child = spawn_rollout(&flags(&server.url(), &output));
    wait_for_a_group(&output).await;
    (server, output, child)
}

/// `--resume` of the same run against `server`, to its end.
async fn resume_on(server: &Server, output: &Path) -> Output {
    let mut resume = flags(&server.url(), output);
    resume.push("--resume".to_owned());
    wait_output(spawn_rollout(&resume)).await
}

/// Every group in `samples` is whole (`N` samples, indices `g * N ..`), contiguous, and appears once;
/// returns the group indices.
fn whole_groups(samples: &[Sample]) -> Vec<usize> {
    assert_eq!(samples.len() % N, 0, "only whole groups are written");
    let mut groups = Vec::new();
    for block in samples.chunks(N) {
        let g = block[0].group_index.expect("group_index is set");
        let indices: Vec<_> = block.iter().map(|s| s.index).collect();
        let expected: Vec<_> = (0..N).map(|i| Some(g * N + i)).collect();
        assert_eq!(indices, expected, "group {g} is written whole and in order");
        assert!(!groups.contains(&g), "group {g} is written once");
        groups.push(g);
    }
    groups
}

/// The samples keyed by (group, index), as JSON, for comparing runs whose groups finished in other orders.
fn by_index(samples: &[Sample]) -> BTreeMap<(usize, usize), String> {
    samples
        .iter()
        .map(|s| {
            let key = (s.group_index.unwrap(), s.index.unwrap());
            (key, s.to_json().unwrap())
        })
        .collect()
}

async fn wait_output(child: Child) -> Output {
    tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap()
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// The uninterrupted run of the same flags, through the library.
async fn uninterrupted(url: &str, name: &str) -> Vec<Sample> {
    let output = temp_path(name);
    let args =
        RolloutArgs::parse_from(std::iter::once("rollout".to_owned()).chain(flags(url, &output)));
    let report = command::run_command(args).await.expect("the run works");
    assert!(!report.summary.interrupted);
    let samples = samples_in(&output);
    std::fs::remove_file(&output).ok();
    samples
}

#[tokio::test]
async fn sigterm_keeps_the_finished_groups_aborts_the_rest_and_resume_completes_them() {
    let (server, output, child) = run_until_a_group("sigterm.jsonl").await;
    let url = server.url();
    signal(&child, "TERM");
    let out = wait_output(child).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(143), "{stdout}");
    assert!(stdout.contains("interrupted"), "{stdout}");

    let kept = samples_in(&output);
    let groups = whole_groups(&kept);
    assert!(!groups.is_empty() && groups.len() < 16, "{groups:?}");
    assert!(
        stdout.contains(&format!("{} finished", groups.len())),
        "the summary counts the groups written: {stdout}"
    );
    // The requests in flight were aborted on the server, not left running.
    let metrics = http_get(&format!("{url}/metrics")).await;
    let aborted = metric(&metrics, "sglang:num_aborted_requests_total");
    assert!(aborted >= 1.0, "{metrics}");

    let fast = fast_mock().await;
    let out = resume_on(&fast, &output).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!("{} already in the output", groups.len())),
        "{stdout}"
    );
    let resumed = samples_in(&output);
    let mut all = whole_groups(&resumed);
    all.sort_unstable();
    assert_eq!(all, (0..16).collect::<Vec<_>>());
    assert_eq!(
        &resumed[..kept.len()],
        &kept[..],
        "what was kept stays as it was"
    );
    let reference = uninterrupted(&fast.url(), "sigterm-full.jsonl").await;
    assert_eq!(by_index(&resumed), by_index(&reference));
    std::fs::remove_file(&output).ok();
}

#[tokio::test]
async fn sigkill_leaves_only_whole_groups_and_resume_completes_them() {
    // The slow mock lives until the end of the test; the resume runs against a fast one.
    let (_slow, output, child) = run_until_a_group("sigkill.jsonl").await;
    signal(&child, "KILL");
    let out = wait_output(child).await;
    assert_eq!(out.status.code(), None, "killed by the signal");
    let kept = samples_in(&output);
    assert!(!whole_groups(&kept).is_empty());

    let fast = fast_mock().await;
    let out = resume_on(&fast, &output).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resumed = samples_in(&output);
    let reference = uninterrupted(&fast.url(), "sigkill-full.jsonl").await;
    assert_eq!(by_index(&resumed), by_index(&reference));
    std::fs::remove_file(&output).ok();
}

#[tokio::test]
async fn a_server_that_dies_fails_the_command_with_a_summary_and_a_bounded_log() {
    let (server, output, child) = run_until_a_group("dead.jsonl").await;
    server.shutdown().await.expect("the mock stops");
    let out = wait_output(child).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let kept = samples_in(&output);
    let groups = whole_groups(&kept);
    assert!(
        stdout.contains(&format!(
            "samples      {} from {} of 16 prompts",
            kept.len(),
            groups.len()
        )),
        "the summary counts the prompts the samples came from: {stdout}"
    );
    assert!(
        stdout.contains("failed") && stdout.contains("first: group"),
        "{stdout}"
    );
    assert!(stderr.contains("groups failed"), "{stderr}");
    // The retries are counted in the summary and in a few log lines, not logged one by one.
    let retries: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("retries      "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the summary counts the retries");
    let warn_lines = stderr.lines().filter(|l| l.contains("WARN")).count() as u64;
    assert!(retries > 10, "{stdout}");
    assert!(warn_lines <= 8 && warn_lines < retries, "{stderr}");

    std::fs::remove_file(&output).ok();
}

#[tokio::test]
async fn allow_partial_accepts_a_rollout_with_failed_groups() {
    use mock_server::{Fault, FaultConfig, FaultRule};
    for (extra, code) in [(None, 1), (Some("--allow-partial"), 0)] {
        // The first request (a sample of group 0) is refused with a 400, which is not retried: group 0
        // fails, the other 15 finish.
        let mut rule = FaultRule::new("status;code=400".parse::<Fault>().unwrap());
        rule.first = Some(1);
        let server = Server::start(ServerConfig {
            port: 0,
            faults: FaultConfig {
                seed: 0,
                rules: vec![rule],
            },
            ..ServerConfig::default()
        })
        .await
        .unwrap();
        let output = temp_path(&format!("partial-{code}.jsonl"));
        let mut args = flags_with(&server.url(), &output, 8, 1);
        args.extend(extra.map(str::to_owned));
        let out = wait_output(spawn_rollout(&args)).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(code), "{stdout}");
        assert!(stdout.contains("15 finished, 1 failed"), "{stdout}");
        let mut groups = whole_groups(&samples_in(&output));
        groups.sort_unstable();
        assert_eq!(groups, (1..16).collect::<Vec<_>>());
        std::fs::remove_file(&output).ok();
    }
}

/// `GET url` over a plain TCP connection (the mock answers HTTP/1.1 and closes on `Connection: close`).
async fn http_get(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let mut conn = tokio::net::TcpStream::connect(host)
        .await
        .expect("the mock listens");
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await.unwrap();
    answer
}

fn metric(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn resume_drops_a_torn_line_and_a_cut_group_and_refuses_other_prompts() {
    use rollout_cli::command::{CommandError, ResumeError};
    let fast = fast_mock().await;
    let full = uninterrupted(&fast.url(), "torn-full.jsonl").await;
    let output = temp_path("torn.jsonl");
    let lines: Vec<String> = full.iter().map(|s| s.to_json().unwrap() + "\n").collect();
    // Two whole groups, two samples of a third, and half a line.
    let whole: String = lines[..2 * N].concat();
    let cut = format!("{whole}{}{}", lines[2 * N], lines[2 * N + 1]);
    let torn = &lines[2 * N + 2][..lines[2 * N + 2].len() / 2];
    std::fs::write(&output, format!("{cut}{torn}")).unwrap();

    let args = RolloutArgs::parse_from(
        std::iter::once("rollout".to_owned())
            .chain(flags(&fast.url(), &output))
            .chain(["--resume".to_owned()]),
    );
    let prompts = rollout_cli::prompts::builtin();
    let resume = command::prepare_resume(&args, &prompts, &PromptFormat::ChatMl)
        .expect("the output resumes");
    let mut kept_groups = whole_groups(&full[..2 * N]);
    kept_groups.sort_unstable();
    assert_eq!(resume.groups.into_iter().collect::<Vec<_>>(), kept_groups);
    assert_eq!(resume.samples, full[..2 * N]);
    assert_eq!(
        std::fs::read_to_string(&output).unwrap(),
        whole,
        "the cut group and the torn line are gone"
    );

    // The same file read for another prompt set (raw prompts instead of ChatML) is refused, and kept.
    let err = command::prepare_resume(&args, &prompts, &PromptFormat::Raw).unwrap_err();
    assert!(
        matches!(
            err,
            CommandError::Resume {
                source: ResumeError::OtherPrompt { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(std::fs::read_to_string(&output).unwrap(), whole);
    std::fs::remove_file(&output).ok();
}
