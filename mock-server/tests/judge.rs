//! Record, replay and conform against the mock itself, and the golden recordings of the real releases.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mock_server::judge::conform::{ConformOptions, Known, Target, conform};
use mock_server::judge::corpus::ModelKind;
use mock_server::judge::{Corpus, RecordOptions, Recorder, Recording, Replay, ReplayOptions};
use mock_server::{LatencyConfig, Server, ServerConfig};

use crate::qwen_tokenizer::qwen_tokenizer;

fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sglang-mock-judge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// One request and the bytes its answer carried.
async fn send(
    client: &reqwest::Client,
    base: &str,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, Vec<u8>) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = client.request(method, format!("{base}{path}"));
    if !body.is_empty() {
        request = request
            .header("content-type", "application/json")
            .body(body.to_owned());
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.bytes().await.unwrap().to_vec())
}

/// A mock and a recorder in front of it, writing to the temporary file `name`.
async fn recorded_mock(name: &str) -> (Server, Recorder, PathBuf) {
    let server = Server::start(ServerConfig {
        port: 0,
        ..ServerConfig::default()
    })
    .await
    .unwrap();
    let out = temp_file(name);
    let recorder = Recorder::start(RecordOptions {
        upstream: server.url(),
        out: out.clone(),
        host: "127.0.0.1".into(),
        port: 0,
    })
    .await
    .unwrap();
    (server, recorder, out)
}

fn session() -> Vec<(&'static str, &'static str, String)> {
    vec![
        (
            "POST",
            "/generate",
            r#"{"text":"Hello","rid":"first","stream":true,"return_logprob":true,"sampling_params":{"max_new_tokens":6,"ignore_eos":true}}"#.to_owned(),
        ),
        ("POST", "/generate", r#"{"text":"Hello","sampling_params":{"max_new_tokens":3}}"#.to_owned()),
        ("GET", "/no_such_route", String::new()),
        ("POST", "/generate", "{not json".to_owned()),
    ]
}

#[tokio::test]
async fn a_recording_of_the_mock_replayed_is_byte_identical() {
    let (server, recorder, out) = recorded_mock("session.jsonl").await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut seen = Vec::new();
    for (method, path, body) in session() {
        seen.push(send(&client, &recorder.url(), method, path, &body).await);
    }
    assert_eq!(recorder.finish().await.unwrap(), 4);

    let recording = Recording::read(&out).unwrap();
    assert_eq!(
        recording.header.release.as_deref(),
        Some(server.state().config().sglang_version.to_string().as_str())
    );
    assert!(recording.header.server_info.is_some());
    assert_eq!(recording.exchanges.len(), 4);
    for (exchange, (status, bytes)) in recording.exchanges.iter().zip(&seen) {
        assert_eq!(exchange.response.status, *status);
        assert_eq!(
            &exchange.response.body(),
            bytes,
            "#{} as recorded",
            exchange.seq
        );
        assert!(exchange.response.complete);
    }
    // The stream arrived in more than one chunk, each with its time.
    let stream = &recording.exchanges[0].response;
    assert!(stream.chunks.len() > 1, "{} chunks", stream.chunks.len());
    assert!(stream.chunks.windows(2).all(|w| w[0].ms <= w[1].ms));

    let replay = Replay::start(
        recording,
        ReplayOptions {
            speed: 0.0,
            ..ReplayOptions::default()
        },
    )
    .await
    .unwrap();
    for ((method, path, body), expected) in session().into_iter().zip(&seen) {
        // A fresh rid, as a client sends on every run.
        let body = body.replace(r#""rid":"first""#, r#""rid":"second""#);
        assert_eq!(
            &send(&client, &replay.url(), method, path, &body).await,
            expected,
            "{method} {path}"
        );
    }
    let report = replay.finish().await.unwrap();
    assert_eq!(
        (report.served, report.misses.len(), report.unused.len()),
        (4, 0, 0)
    );
    let _ = std::fs::remove_file(out);
}

#[tokio::test]
async fn a_replay_names_the_nearest_request_of_a_miss_and_reports_what_it_did_not_use() {
    let (_server, recorder, out) = recorded_mock("miss.jsonl").await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let body = r#"{"text":"Hello","sampling_params":{"max_new_tokens":3}}"#;
    send(&client, &recorder.url(), "POST", "/generate", body).await;
    send(&client, &recorder.url(), "GET", "/health", "").await;
    recorder.finish().await.unwrap();

    let replay = Replay::start(
        Recording::read(&out).unwrap(),
        ReplayOptions {
            speed: 0.0,
            ..ReplayOptions::default()
        },
    )
    .await
    .unwrap();
    let other = r#"{"text":"Hello","sampling_params":{"max_new_tokens":4}}"#;
    let (status, answer) = send(&client, &replay.url(), "POST", "/generate", other).await;
    assert_eq!(status, 500);
    let message = serde_json::from_slice::<serde_json::Value>(&answer).unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        message,
        "replay: POST /generate: no recorded request matches; the nearest is #0 POST /generate, which differs \
         at sampling_params.max_new_tokens (recorded 3, sent 4)"
    );
    // The recorded one is still there, once.
    assert_eq!(
        send(&client, &replay.url(), "POST", "/generate", body)
            .await
            .0,
        200
    );
    assert_eq!(
        send(&client, &replay.url(), "POST", "/generate", body)
            .await
            .0,
        500
    );
    let report = replay.finish().await.unwrap();
    assert_eq!(report.served, 1);
    assert_eq!(report.misses.len(), 2);
    assert!(
        report.misses[1].contains("recorded 1 time(s), and every one has been replayed"),
        "{report:?}"
    );
    assert_eq!(report.unused, ["#1 GET /health"]);
    let _ = std::fs::remove_file(out);
}

fn paced(release: &str) -> ServerConfig {
    ServerConfig {
        port: 0,
        sglang_version: release.parse().unwrap(),
        latency: LatencyConfig {
            itl_ms: 2.0,
            ..LatencyConfig::default()
        },
        ..ServerConfig::default()
    }
}

fn options(target: Target, release: Option<&str>, record: Option<PathBuf>) -> ConformOptions {
    ConformOptions {
        target,
        mock: ServerConfig {
            latency: LatencyConfig {
                itl_ms: 2.0,
                ..LatencyConfig::default()
            },
            ..ServerConfig::default()
        },
        release: release.map(str::to_owned),
        corpus: Corpus::builtin(),
        known: Known::default(),
        model: ModelKind::Dense,
        record,
        timeout: Duration::from_secs(60),
    }
}

/// The mock judged against itself under the same release agrees on every exchange of the corpus, live and
/// from a recording of it; against another release it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_conforms_to_itself_and_not_to_another_release() {
    let target = Server::start(paced("0.5.23")).await.unwrap();
    let out = temp_file("self.jsonl");
    let report = conform(options(Target::Url(target.url()), None, Some(out.clone())))
        .await
        .unwrap();
    assert_eq!(report.release, "0.5.23");
    assert!(report.exchanges > 100, "{}", report.text());
    assert!(report.found.is_empty(), "{}", report.text());
    drop(target);

    let replayed = conform(options(Target::File(out.clone()), None, None))
        .await
        .unwrap();
    assert!(
        replayed.found.is_empty() && replayed.replay_misses.is_empty(),
        "{}",
        replayed.text()
    );

    let other = conform(options(Target::File(out.clone()), Some("0.5.3"), None))
        .await
        .unwrap();
    assert!(!other.ok(), "{}", other.text());
    let text = other.text();
    assert!(
        text.contains("DIFF  status at the answer: target 200 | mock 404"),
        "{text}"
    );
    let _ = std::fs::remove_file(out);
}

/// The golden recordings of the real releases (`mock-server/conform/golden/`, made by
/// `scripts/real_sglang.py golden`): every exchange agrees with the mock except the documented list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_goldens_of_the_real_releases_conform() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("conform/golden");
    let mut goldens: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    goldens.sort();
    assert!(!goldens.is_empty(), "no goldens in {}", dir.display());
    let mut failures = Vec::new();
    for golden in goldens {
        let moe = golden
            .file_name()
            .unwrap()
            .to_string_lossy()
            .contains("-moe");
        let report = conform(golden_options(&golden, moe)).await.unwrap();
        assert!(report.exchanges > 0, "{}", golden.display());
        // Every difference documented, every recorded exchange replayed, and no documented difference that no
        // longer happens (its entry goes with the fix).
        if !report.ok()
            || !report.replay_misses.is_empty()
            || !report.unused_known.is_empty()
            || !report.notes.is_empty()
        {
            failures.push(report.text());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A mock launched otherwise than the target is told so: run against 0.5.23's golden with its toy tokenizer and
/// no flags, the report names the tokenizer (with how many differences are token counts) and each flag whose
/// value the recording's `/server_info` reports otherwise (the context of 4,096 and the pool of 65,536).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mock_launched_otherwise_than_the_target_is_named_in_the_report() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("conform/golden/0.5.23.jsonl");
    let mut options = golden_options(&golden, false);
    options.mock = ServerConfig::default();
    let report = conform(options).await.unwrap();
    let text = report.text();
    assert_eq!(report.notes.len(), 3, "{text}");
    assert!(
        report.notes[0].starts_with("the mock runs its toy tokenizer, the target ")
            && report.notes[0].contains("token counts and per-token lists"),
        "{text}"
    );
    assert!(
        report.notes[1].starts_with("the target reports max_req_input_len 4090, the mock 32762"),
        "{text}"
    );
    assert!(
        report.notes[2].starts_with("the target reports max_total_tokens 65536, the mock null"),
        "{text}"
    );
    assert!(
        text.contains("\nNOTE  the mock runs its toy tokenizer"),
        "{text}"
    );
}

/// The mock's flags for a golden, as the release was launched (`scripts/real_sglang.py start`): Qwen's tokenizer,
/// a model directory whose `config.json` names the tiny model and its context of 4,096 (the directory decides
/// it, as it does the release's, so `context_length` stays unset), `--max-total-tokens 65536`, and for the MoE
/// model its routed-experts shape.
fn golden_options(golden: &Path, moe: bool) -> ConformOptions {
    let (architecture, model_type) = if moe {
        ("Qwen3MoeForCausalLM", "qwen3_moe")
    } else {
        ("Qwen3ForCausalLM", "qwen3")
    };
    let model_dir = std::env::temp_dir().join(format!(
        "sglang-mock-golden-{model_type}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&model_dir).unwrap();
    std::fs::write(
        model_dir.join("config.json"),
        serde_json::json!({
            "architectures": [architecture],
            "model_type": model_type,
            "max_position_embeddings": 4096,
        })
        .to_string(),
    )
    .unwrap();
    let mut mock = ServerConfig {
        tokenizer: Some(qwen_tokenizer()),
        model_path: model_dir.to_string_lossy().into_owned(),
        max_total_tokens: Some(65536),
        ..ServerConfig::default()
    };
    if moe {
        mock.enable_return_routed_experts = true;
        mock.num_experts = 8;
        mock.num_experts_per_tok = 2;
        mock.num_hidden_layers = 2;
    }
    ConformOptions {
        target: Target::File(golden.to_owned()),
        mock,
        release: None,
        corpus: Corpus::builtin(),
        known: Known::builtin(),
        model: if moe {
            ModelKind::Moe
        } else {
            ModelKind::Dense
        },
        record: None,
        timeout: Duration::from_secs(60),
    }
}
