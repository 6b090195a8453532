//! `sglang-mock oracle`, the binary itself: for the shared request set, streamed and not, under several
//! flag sets (seed, profile, script, vocabulary), its output equals the live server's answer once the timing
//! fields and generated ids are normalised; errors print the server's error body and exit with 1.

use std::io::Write;
use std::process::{Command, Stdio};

use mock_server::oracle::{normalize_body, normalize_item};
use mock_server::{ServerConfig, SglangVersion};
use serde_json::{Value, json};

use crate::common::{Live, data_path, load_json, sse_json};

/// Run `sglang-mock oracle FLAGS` on `body`; its stdout and whether it exited with 0.
fn run_oracle(flags: &[String], body: &Value) -> (Vec<u8>, bool) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sglang-mock"))
        .arg("oracle")
        .args(flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&serde_json::to_vec(body).expect("serialisable"))
        .expect("the body is written");
    let output = child.wait_with_output().expect("the binary ends");
    (output.stdout, output.status.success())
}

/// The live server's answer, normalised as the oracle prints it.
async fn live_answer(live: &Live, body: &Value) -> (Value, bool) {
    // The oracle command answers as a fresh server: the live one forgets its prefix cache first.
    live.post_json("/flush_cache", &json!({})).await;
    let reply = live.post_json("/generate", body).await;
    let bytes = serde_json::to_vec(body).expect("serialisable");
    let plan = live.oracle.plan(&bytes);
    // An uncaught exception breaks a stream after its headers; the oracle reports it as the 500 it is.
    if reply.broken {
        return (json!("Internal Server Error"), false);
    }
    if reply.content_type().starts_with("text/event-stream") {
        let events = sse_json(&reply.body)
            .into_iter()
            .map(|mut event| {
                let index = event["index"].as_u64().unwrap_or(0) as usize;
                let fresh = plan
                    .as_ref()
                    .is_ok_and(|p| p.items.get(index).is_some_and(|i| i.rid_is_fresh));
                normalize_item(&mut event, fresh);
                event
            })
            .collect();
        return (Value::Array(events), true);
    }
    // The plain-text 500 compares as its text.
    let mut value = serde_json::from_slice(&reply.body).unwrap_or_else(|_| json!(reply.text()));
    if let Ok(plan) = plan
        && reply.status == 200
    {
        normalize_body(&mut value, &plan);
    }
    (value, reply.status == 200)
}

fn parse_oracle(stdout: &[u8], streamed: bool) -> Value {
    if streamed {
        Value::Array(sse_json(stdout))
    } else {
        serde_json::from_slice(stdout)
            .unwrap_or_else(|_| json!(String::from_utf8_lossy(stdout).trim_end()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oracle_command_prints_the_live_servers_answer() {
    let script = data_path("script.json").display().to_string();
    let setups: Vec<(Vec<String>, ServerConfig)> = vec![
        (vec![], ServerConfig::default()),
        (
            vec![
                "--seed".into(),
                "7".into(),
                "--profile".into(),
                "mid".into(),
            ],
            ServerConfig {
                seed: 7,
                sglang_version: SglangVersion::V0_5_3,
                ..ServerConfig::default()
            },
        ),
        (
            vec![
                "--script".into(),
                script.clone(),
                "--vocab-size".into(),
                "50000".into(),
            ],
            ServerConfig {
                scripted: mock_server::ScriptRule::load(&script).expect("the script loads"),
                vocab_size: Some(50_000),
                ..ServerConfig::default()
            },
        ),
    ];
    let requests = load_json("requests.json");
    let mut bodies: Vec<Value> = requests.as_array().expect("a list").clone();
    bodies.push(
        json!({"text": "Judgment please", "sampling_params": {"max_new_tokens": 20},
                       "return_logprob": true}),
    );
    bodies.push(json!({"text": "x", "sampling_params": {"temperature": -1}}));
    bodies.push(json!({"text": "x", "sampling_params": {"max_new_tokens": 3, "stop": 5}}));
    let mut compared = 0;
    for (flags, config) in setups {
        let live = Live::start(config).await;
        for body in &bodies {
            for stream in [false, true] {
                let mut body = body.clone();
                body["stream"] = json!(stream);
                // The command predicts a fresh server's answer, each prompt's first draw (MODEL.md 8.3).
                let reset = live.post_json("/admin/reset", &json!({})).await;
                assert_eq!(reset.status, 200, "{}", reset.text());
                let (want, ok) = live_answer(&live, &body).await;
                let streamed = want.is_array() && stream && ok;
                let flags = flags.clone();
                let request = body.clone();
                let (stdout, exit_ok) =
                    tokio::task::spawn_blocking(move || run_oracle(&flags, &request))
                        .await
                        .expect("joins");
                assert_eq!(exit_ok, ok, "exit status for {body}");
                let got = parse_oracle(&stdout, streamed);
                assert_eq!(got, want, "oracle vs live server for {body}");
                compared += 1;
            }
        }
        live.stop().await.expect("clean shutdown");
    }
    assert_eq!(compared, 3 * bodies.len() * 2);
}
