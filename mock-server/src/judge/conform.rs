//! `sglang-mock conform`: send a corpus to a target (a live SGLang, or a recording of one served by a
//! [`Replay`]) and to the mock under the same release and tokenizer, compare each pair of answers
//! ([`compare`]), and report every difference that the documented list ([`Known`]) does not explain.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::compare::{Difference, Observed, compare};
use super::corpus::{Case, Corpus, ModelKind, Step};
use super::listen::client;
use super::record::{RecordOptions, Recorder, release_in, server_info};
use super::recording::Recording;
use super::replay::{Replay, ReplayOptions};
use crate::http::Server;
use mock_core::ServerConfig;

/// The latency `conform` gives a mock configured without one: about what the CPU release takes per token, so
/// that a control scenario (abort a running stream) finds the mock's stream still running, as it finds the
/// release's.
pub const MOCK_ITL_MS: f64 = 5.0;

/// Where the target's answers come from.
#[derive(Debug, Clone)]
pub enum Target {
    /// A live server's base URL.
    Url(String),
    /// A recording, replayed at once.
    File(PathBuf),
}

impl Target {
    /// A URL (`http://...`) or a file path.
    pub fn parse(text: &str) -> Target {
        if text.starts_with("http://") || text.starts_with("https://") {
            Target::Url(text.trim_end_matches('/').to_owned())
        } else {
            Target::File(PathBuf::from(text))
        }
    }
}

/// Everything one `conform` run needs.
#[derive(Debug)]
pub struct ConformOptions {
    pub target: Target,
    /// The mock's configuration. Its release is the target's when `release` is `None`.
    pub mock: ServerConfig,
    /// The release to compare as; `None` takes the target's (its server info, or the recording's header).
    pub release: Option<String>,
    pub corpus: Corpus,
    pub known: Known,
    /// Which of the corpus's cases to send: the dense model's, or the MoE model's.
    pub model: ModelKind,
    /// Record the target's answers to this file as they come (a live target only).
    pub record: Option<PathBuf>,
    /// How long one answer may take.
    pub timeout: Duration,
}

/// Why `conform` could not run (a difference is not an error: it is in the [`Report`]).
#[derive(Debug, thiserror::Error)]
pub enum ConformError {
    #[error(transparent)]
    Recording(#[from] super::recording::RecordingError),
    #[error("the target's release is unknown: it has no server info; give --sglang-version")]
    NoRelease,
    #[error("the target's release {0:?} is not one the mock answers as")]
    Release(String),
    #[error("cannot start the mock")]
    Mock(#[from] crate::http::StartError),
    #[error("cannot serve the recording")]
    Replay(#[source] std::io::Error),
    #[error("cannot record the target")]
    Record(#[from] super::record::RecordError),
    #[error("--record records a live target, not a recording")]
    RecordFile,
    #[error(
        "{0:?}: conform speaks plain http:// (run it beside the server, or through a local tunnel)"
    )]
    Https(String),
}

/// The documented differences: each entry explains the differences it matches, with its reason.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Known {
    pub differences: Vec<KnownDifference>,
}

/// One documented difference.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KnownDifference {
    /// The releases it holds for; empty: every release.
    #[serde(default)]
    pub releases: Vec<String>,
    /// A prefix of the case names it holds for (`generate/`); empty: every case.
    #[serde(default)]
    pub case: String,
    /// The difference's kind ([`Difference::kind`]).
    pub kind: String,
    /// Where ([`Difference::at`]): the path, or its end after a `.` (`meta_info.cached_tokens` is also
    /// `last event.meta_info.cached_tokens` and `[].meta_info.cached_tokens`); `*` anywhere.
    pub at: String,
    /// Text the target's or the mock's side must contain; empty: any.
    #[serde(default)]
    pub contains: String,
    /// Why the mock differs here, and where it is tracked.
    pub reason: String,
}

impl KnownDifference {
    fn explains(&self, release: &str, case: &str, d: &Difference) -> bool {
        (self.releases.is_empty() || self.releases.iter().any(|r| r == release))
            && case.starts_with(&self.case)
            && self.kind == d.kind
            && (self.at == "*"
                || self.at == d.at
                || d.at
                    .strip_suffix(self.at.as_str())
                    .is_some_and(|head| head.ends_with('.')))
            && (self.contains.is_empty()
                || d.target.contains(&self.contains)
                || d.mock.contains(&self.contains))
    }
}

impl Known {
    /// The list that ships with the project (`mock-server/conform/known.json`).
    pub fn builtin() -> Known {
        serde_json::from_str(include_str!("../../conform/known.json")).unwrap_or_default()
    }

    pub fn parse(bytes: &[u8]) -> serde_json::Result<Known> {
        serde_json::from_slice(bytes)
    }
}

/// One difference found, where, and whether the documented list explains it.
#[derive(Debug, Clone, Serialize)]
pub struct Found {
    pub case: String,
    /// The step of the case (0 for a case of one request).
    pub step: usize,
    #[serde(flatten)]
    pub difference: Difference,
    /// The reason, when a known difference explains it.
    pub known: Option<String>,
}

/// What a `conform` run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub release: String,
    pub target: String,
    pub cases: usize,
    pub exchanges: usize,
    /// Exchanges whose answers agree in everything compared.
    pub agree: usize,
    pub found: Vec<Found>,
    /// Known differences that explained nothing in this run.
    pub unused_known: Vec<String>,
    /// The target's exchanges a replay could not answer, and the recorded ones it never used.
    pub replay_misses: Vec<String>,
    /// Where the mock was not launched as the target was (its tokenizer, its flags, as the target's server info
    /// reports them), and which differences follow from that.
    pub notes: Vec<String>,
}

impl Report {
    /// Every difference is explained by the documented list.
    pub fn ok(&self) -> bool {
        self.found.iter().all(|f| f.known.is_some())
    }

    /// The differences not explained.
    pub fn unexplained(&self) -> impl Iterator<Item = &Found> {
        self.found.iter().filter(|f| f.known.is_none())
    }

    /// The report as text: a summary line, then one line per difference class (kind, place, both sides),
    /// unexplained ones first, each with how many exchanges and which cases.
    pub fn text(&self) -> String {
        let differing: std::collections::BTreeSet<(&str, usize)> = self
            .found
            .iter()
            .map(|f| (f.case.as_str(), f.step))
            .collect();
        let unexplained = self.unexplained().count();
        let mut out = format!(
            "conform: SGLang {} at {}: {} cases, {} exchanges: {} agree, {} differ; {} difference(s) found, {} not in the documented list\n",
            self.release,
            self.target,
            self.cases,
            self.exchanges,
            self.agree,
            differing.len(),
            self.found.len(),
            unexplained,
        );
        for note in &self.notes {
            out.push_str(&format!("NOTE  {note}\n"));
        }
        type Class<'a> = (bool, &'a str, &'a str, &'a str, &'a str);
        let mut classes: BTreeMap<Class<'_>, (Vec<&str>, Option<&str>)> = BTreeMap::new();
        for f in &self.found {
            let d = &f.difference;
            let entry = classes
                .entry((f.known.is_some(), d.kind, &d.at, &d.target, &d.mock))
                .or_insert_with(|| (Vec::new(), f.known.as_deref()));
            entry.0.push(&f.case);
        }
        for ((known, kind, at, target, mock), (cases, reason)) in classes {
            let mut names: Vec<&str> = cases.clone();
            names.dedup();
            let shown: Vec<&str> = names.iter().take(4).copied().collect();
            let more = names.len().saturating_sub(4);
            let at = if at.is_empty() { "the answer" } else { at };
            out.push_str(&format!(
                "{} {kind} at {at}: target {target} | mock {mock} [{} exchange(s): {}{}]{}\n",
                if known { "known" } else { "DIFF " },
                cases.len(),
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                },
                reason.map(|r| format!(" ({r})")).unwrap_or_default(),
            ));
        }
        for miss in &self.replay_misses {
            out.push_str(&format!("replay {miss}\n"));
        }
        for unused in &self.unused_known {
            out.push_str(&format!("unused known difference: {unused}\n"));
        }
        out
    }
}

/// Runs the corpus against the target and the mock and compares every answer.
pub async fn conform(options: ConformOptions) -> Result<Report, ConformError> {
    let client = client(Some(options.timeout));
    let header_release;
    let target_info;
    let mut replay = None;
    let mut recorder = None;
    let (base, shown) = match &options.target {
        Target::Url(url) if !url.starts_with("http://") => {
            return Err(ConformError::Https(url.clone()));
        }
        Target::Url(url) => {
            let base = match &options.record {
                Some(out) => {
                    let started = Recorder::start(RecordOptions {
                        upstream: url.clone(),
                        out: out.clone(),
                        host: "127.0.0.1".into(),
                        port: 0,
                    })
                    .await?;
                    header_release = started.release();
                    target_info = started.server_info().cloned();
                    let base = started.url();
                    recorder = Some(started);
                    base
                }
                None => {
                    target_info = server_info(&client, url).await;
                    header_release = target_info.as_ref().and_then(release_in);
                    url.clone()
                }
            };
            (base, url.clone())
        }
        Target::File(path) => {
            if options.record.is_some() {
                return Err(ConformError::RecordFile);
            }
            let recording = Recording::read(path)?;
            header_release = recording.header.release.clone();
            target_info = recording.header.server_info.clone();
            let started = Replay::start(
                recording,
                ReplayOptions {
                    speed: 0.0,
                    ..ReplayOptions::default()
                },
            )
            .await
            .map_err(ConformError::Replay)?;
            let base = started.url();
            replay = Some(started);
            (base, path.display().to_string())
        }
    };
    let release = options
        .release
        .clone()
        .or(header_release)
        .ok_or(ConformError::NoRelease)?;
    let mut config = options.mock;
    config.sglang_version = release
        .parse()
        .map_err(|_| ConformError::Release(release.clone()))?;
    config.host = "127.0.0.1".into();
    config.port = 0;
    if !config.latency.is_active() {
        config.latency.itl_ms = MOCK_ITL_MS;
    }
    let toy_tokenizer = config.tokenizer.is_none();
    let mock = Server::start(config).await?;
    let mock_url = mock.url();
    let mock_info = server_info(&client, &mock_url).await;

    let mut found = Vec::new();
    let mut explained = vec![false; options.known.differences.len()];
    let mut sent: Vec<&str> = Vec::new();
    let mut exchanges = 0;
    let mut differing = 0;
    let mut cases = 0;
    for case in options.corpus.cases_for(&release, options.model) {
        cases += 1;
        sent.push(&case.name);
        let target_answers = run_case(&client, &base, case, options.timeout).await;
        let mock_answers = run_case(&client, &mock_url, case, options.timeout).await;
        for ((step, target), (_, mock)) in target_answers.iter().zip(&mock_answers) {
            exchanges += 1;
            let differences = compare(target, mock, case.clock);
            if !differences.is_empty() {
                differing += 1;
            }
            for difference in differences {
                let known = options
                    .known
                    .differences
                    .iter()
                    .position(|k| k.explains(&release, &case.name, &difference))
                    .map(|i| {
                        explained[i] = true;
                        options.known.differences[i].reason.clone()
                    });
                found.push(Found {
                    case: case.name.clone(),
                    step: *step,
                    difference,
                    known,
                });
            }
        }
    }
    let _ = mock.shutdown().await;
    let mut replay_misses = Vec::new();
    if let Some(replay) = replay {
        let report = replay.finish().await.map_err(ConformError::Replay)?;
        replay_misses.extend(report.misses.iter().map(|m| format!("miss: {m}")));
        replay_misses.extend(report.unused.iter().map(|u| format!("unused: {u}")));
    }
    if let Some(recorder) = recorder {
        let path = recorder.path().display().to_string();
        let written = recorder.finish().await.map_err(|e| {
            ConformError::Record(super::record::RecordError::Out {
                path: path.clone(),
                source: e,
            })
        })?;
        tracing::info!(written, path, "recorded the target's answers");
    }
    // The entries for this release, about cases this run sent, that explained nothing.
    let unused_known = options
        .known
        .differences
        .iter()
        .zip(&explained)
        .filter(|(k, explained)| {
            !**explained
                && (k.releases.is_empty() || k.releases.contains(&release))
                && sent.iter().any(|name| name.starts_with(&k.case))
        })
        .map(|(k, _)| format!("{} at {} ({}): {}", k.kind, k.at, k.case, k.reason))
        .collect();
    let notes = launch_notes(
        target_info.as_ref(),
        mock_info.as_ref(),
        toy_tokenizer,
        &found,
    );
    Ok(Report {
        release,
        target: shown,
        cases,
        exchanges,
        agree: exchanges - differing,
        found,
        unused_known,
        replay_misses,
        notes,
    })
}

/// The `/server_info` fields that decide answers the corpus compares, with the mock's flag for each.
const LAUNCH_FIELDS: [(&str, &str); 8] = [
    (
        "max_req_input_len",
        "--context-length, or --model-path with the target's config.json",
    ),
    ("max_total_tokens", "--max-total-tokens"),
    ("page_size", "--page-size"),
    ("disable_radix_cache", "--disable-radix-cache"),
    ("max_running_requests", "--max-running-requests"),
    ("enable_cache_report", "--enable-cache-report"),
    ("stream_interval", "--stream-interval"),
    (
        "enable_deterministic_inference",
        "--enable-deterministic-inference",
    ),
];

/// Where the mock was launched otherwise than the target: its toy tokenizer where the target has a real one
/// (every token count and per-token list then follows from the tokenizer: how many of the differences are of
/// that kind is counted), and each of [`LAUNCH_FIELDS`] whose value the two servers report differently.
fn launch_notes(
    target: Option<&serde_json::Value>,
    mock: Option<&serde_json::Value>,
    toy_tokenizer: bool,
    found: &[Found],
) -> Vec<String> {
    let Some(target) = target else {
        return Vec::new();
    };
    let mut notes = Vec::new();
    if toy_tokenizer {
        let counted = found
            .iter()
            .filter(|f| decided_by_the_tokenizer(&f.difference))
            .count();
        let tokenizer = target
            .get("tokenizer_path")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("its own");
        notes.push(format!(
            "the mock runs its toy tokenizer, the target {tokenizer}: {counted} of the {} difference(s) are \
             token counts and per-token lists, which the tokenizer decides; give the mock the target's tokenizer \
             (--tokenizer DIR) to compare them",
            found.len()
        ));
    }
    if let Some(mock) = mock {
        for (field, flag) in LAUNCH_FIELDS {
            let (theirs, ours) = (target.get(field), mock.get(field));
            if let (Some(theirs), Some(ours)) = (theirs, ours)
                && theirs != ours
            {
                notes.push(format!(
                    "the target reports {field} {theirs}, the mock {ours}: answers that follow from it differ \
                     ({flag})"
                ));
            }
        }
    }
    notes
}

/// Whether a difference is one a tokenizer decides: a count of prompt tokens (and the totals and cache hits
/// counted from them), or the length of a list with one entry per token.
fn decided_by_the_tokenizer(d: &Difference) -> bool {
    let last = d.at.rsplit('.').next().unwrap_or_default();
    match d.kind {
        "value" => matches!(last, "prompt_tokens" | "cached_tokens" | "total_tokens"),
        "length" => matches!(
            last,
            "input_token_logprobs"
                | "input_top_logprobs"
                | "input_token_ids_logprobs"
                | "tokens"
                | "token_logprobs"
                | "text_offset"
                | "top_logprobs"
        ),
        "type" => last == "cached_tokens_details",
        _ => false,
    }
}

/// A request in flight: how many stream events it has received, and whether it has ended.
type Progress = watch::Receiver<(usize, bool)>;

/// Runs one case's steps against `base`; returns each compared answer with the index of its step.
async fn run_case(
    client: &reqwest::Client,
    base: &str,
    case: &Case,
    timeout: Duration,
) -> Vec<(usize, Observed)> {
    let mut answers = Vec::new();
    let mut running: BTreeMap<String, (Progress, tokio::task::JoinHandle<Observed>)> =
        BTreeMap::new();
    for (index, step) in case.steps().into_iter().enumerate() {
        match step {
            Step::Send {
                send,
                name,
                background,
            } => {
                let (progress, events) = watch::channel((0, false));
                let request = send_request(client.clone(), base.to_owned(), send, progress);
                if background {
                    let name = name.unwrap_or_default();
                    running.insert(name, (events, tokio::spawn(request)));
                } else {
                    answers.push((index, request.await));
                }
            }
            Step::Wait { wait, events } => {
                if let Some((progress, _)) = running.get_mut(&wait) {
                    let reached = progress.wait_for(|(seen, ended)| *seen >= events || *ended);
                    let _ = tokio::time::timeout(timeout, reached).await;
                }
            }
            Step::Sleep { sleep_ms } => tokio::time::sleep(Duration::from_millis(sleep_ms)).await,
            Step::Join { join } => {
                if let Some((_, task)) = running.remove(&join) {
                    let observed = task.await.unwrap_or_else(|err| Observed {
                        status: None,
                        content_type: None,
                        body: vec![],
                        failure: Some(format!("the request's task failed: {err}")),
                    });
                    answers.push((index, observed));
                }
            }
        }
    }
    answers
}

/// Sends one request and reads its answer chunk by chunk, counting stream events as they arrive.
async fn send_request(
    client: reqwest::Client,
    base: String,
    send: super::corpus::Send,
    progress: watch::Sender<(usize, bool)>,
) -> Observed {
    let method =
        reqwest::Method::from_bytes(send.method().as_bytes()).unwrap_or(reqwest::Method::GET);
    let mut request = client.request(method, format!("{base}{}", send.path));
    if send.body.is_some() || send.raw.is_some() {
        request = request
            .header("content-type", "application/json")
            .body(send.body_bytes());
    }
    for (name, value) in &send.headers {
        request = request.header(name, value);
    }
    let failed = |failure: String| Observed {
        status: None,
        content_type: None,
        body: vec![],
        failure: Some(failure),
    };
    let answer = match request.send().await {
        Ok(answer) => answer,
        Err(err) => {
            progress.send_replace((0, true));
            return failed(describe_error(&err));
        }
    };
    let status = answer.status().as_u16();
    let content_type = answer
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = Vec::new();
    let mut chunks = answer.bytes_stream();
    let mut failure = None;
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(bytes) => {
                body.extend_from_slice(&bytes);
                let seen = count_events(&body);
                progress.send_replace((seen, false));
            }
            Err(err) => {
                failure = Some(describe_error(&err));
                break;
            }
        }
    }
    let seen = count_events(&body);
    progress.send_replace((seen, true));
    Observed {
        status: Some(status),
        content_type,
        body,
        failure,
    }
}

fn count_events(body: &[u8]) -> usize {
    body.windows(2).filter(|w| w == b"\n\n").count()
}

fn describe_error(err: &reqwest::Error) -> String {
    if err.is_timeout() {
        "timed out".to_owned()
    } else if err.is_connect() {
        "cannot connect".to_owned()
    } else {
        "the connection broke".to_owned()
    }
}

/// Reads a corpus file, or the built-in corpus when `path` is `None`.
pub fn load_corpus(path: Option<&Path>) -> Result<Corpus, String> {
    load(path, Corpus::builtin, |bytes| {
        Corpus::parse(bytes).map_err(|e| e.to_string())
    })
}

/// Reads a known-differences file, or the built-in list when `path` is `None`.
pub fn load_known(path: Option<&Path>) -> Result<Known, String> {
    load(path, Known::builtin, |bytes| {
        Known::parse(bytes).map_err(|e| e.to_string())
    })
}

/// The file at `path` read with `parse`, or `builtin()`; an error names the file.
fn load<T>(
    path: Option<&Path>,
    builtin: fn() -> T,
    parse: fn(&[u8]) -> Result<T, String>,
) -> Result<T, String> {
    let Some(path) = path else {
        return Ok(builtin());
    };
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}
