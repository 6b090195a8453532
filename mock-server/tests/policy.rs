//! The toy policy's weights on the wire (MODEL.md section 14): a `--model-path` directory is served with its
//! weights, `/update_weights_from_disk` replaces them, a failed update keeps the old ones serving, and
//! `/admin/reset` restores the start-up weights. Expected logprobs come from a model built apart from the server's,
//! under the weights the test wrote to disk.

use std::path::PathBuf;

use mock_server::ServerConfig;
use mock_server::model::{Model, Policy, SLOTS, TENSOR_NAME};
use serde_json::{Value, json};

use crate::common::{InProcess, Reply, sole_problem};

/// A fresh directory under the system's temporary directory.
fn fresh_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("sglang-mock-policy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// A policy whose offsets follow `scale`: every bucket moves every slot, by up to about `2.5 * scale` nats.
fn policy(scale: f32) -> Policy {
    let rows = (0..8)
        .map(|b| std::array::from_fn(|s| scale * (((b * 7 + s * 3) % 11) as f32 - 5.0) / 2.0))
        .collect();
    Policy::new(rows).expect("finite offsets")
}

/// A toy policy directory holding `policy`.
fn policy_dir(name: &str, policy: &Policy) -> PathBuf {
    let dir = fresh_dir(name);
    mock_server::model::save_dir(policy, 151_936, &dir).expect("the directory is written");
    dir
}

fn server_at(dir: &std::path::Path) -> InProcess {
    InProcess::new(ServerConfig {
        model_path: dir.display().to_string(),
        ..ServerConfig::default()
    })
}

const TEMPERATURE: f64 = 0.8;

fn request() -> Value {
    json!({
        "text": "Hello world",
        "sampling_params": {"temperature": TEMPERATURE, "max_new_tokens": 24, "sampling_seed": 11},
        "return_logprob": true,
    })
}

/// The answer's ids and logprobs, and the prompt's ids from its input logprobs' count.
fn tokens(answer: &Value) -> (Vec<u32>, Vec<f32>) {
    let rows = answer["meta_info"]["output_token_logprobs"]
        .as_array()
        .expect("output_token_logprobs");
    rows.iter()
        .map(|row| {
            (
                row[1].as_u64().expect("an id") as u32,
                row[0].as_f64().expect("a logprob") as f32,
            )
        })
        .unzip()
}

/// The logprobs `policy` gives the answer's tokens, computed by a model the server never saw.
fn expected(policy: &Policy, ids: &[u32]) -> Vec<f32> {
    let model = Model::new(ServerConfig::default().model_config()).expect("the default model");
    let mut context = model.tokenizer().encode("Hello world");
    ids.iter()
        .map(|&id| {
            let lp = model
                .distribution_under(policy, &context, TEMPERATURE, &[])
                .logprob(id) as f32;
            context.push(id);
            lp
        })
        .collect()
}

/// `POST /update_weights_from_disk` of `model_path`, with `weight_version` when given.
async fn update(server: &InProcess, model_path: &str, weight_version: Option<&str>) -> Reply {
    let mut body = json!({ "model_path": model_path });
    if let Some(version) = weight_version {
        body["weight_version"] = json!(version);
    }
    server
        .post("/update_weights_from_disk", body.to_string())
        .await
}

async fn answer(server: &InProcess) -> (Vec<u32>, Vec<f32>) {
    let reply = server.generate(&request()).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    tokens(&reply.json())
}

#[tokio::test]
async fn a_model_directory_serves_its_weights_and_an_update_serves_the_new_ones() {
    let (a, b) = (policy(1.0), policy(-1.5));
    let (dir_a, dir_b) = (policy_dir("serve-a", &a), policy_dir("serve-b", &b));
    let server = server_at(&dir_a);
    let (ids, lps) = answer(&server).await;
    assert_eq!(lps, expected(&a, &ids), "served under the start-up weights");
    assert_ne!(
        lps,
        expected(&Policy::zero(8), &ids),
        "the weights move the logprobs"
    );
    let info = server.get("/model_info").await.json();
    assert_eq!(info["policy"]["weight_updates"], 0);
    assert_eq!(
        info["architectures"],
        json!([mock_server::model::ARCHITECTURE])
    );

    let reply = update(&server, &dir_b.display().to_string(), Some("step-1")).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.json()["success"], true);
    let (ids_b, lps_b) = answer(&server).await;
    assert_eq!(lps_b, expected(&b, &ids_b), "served under the new weights");
    assert_ne!((&ids_b, &lps_b), (&ids, &lps));
    let after = server.get("/model_info").await.json();
    assert_eq!(after["policy"]["weight_updates"], 1);
    assert_eq!(after["weight_version"], "step-1");
    assert_ne!(after["policy"]["digest"], info["policy"]["digest"]);
    assert_eq!(after["policy"]["digest"], mock_server::model::digest(&b));

    // `/admin/reset` serves the start-up weights again.
    server.reset().await;
    assert_eq!(answer(&server).await, (ids, lps));
}

/// Writes a `model.safetensors` of one tensor into `dir`.
fn write_tensor(dir: &std::path::Path, name: &str, dtype: &str, shape: [usize; 2], data: &[u8]) {
    let header = json!({name: {"dtype": dtype, "shape": shape, "data_offsets": [0, data.len()]}})
        .to_string();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(dir.join("model.safetensors"), bytes).expect("the file is written");
}

/// Each way a checkpoint can be wrong answers SGLang's `success: false` with its loader's message, and the old
/// weights, version and model path keep serving; the safetensors files here are written by hand, byte by byte,
/// from the format's specification rather than by the crate the server reads them with.
#[tokio::test]
async fn a_failed_update_names_what_was_wrong_and_keeps_the_old_weights() {
    let start = policy(0.7);
    let server = server_at(&policy_dir("fail-start", &start));
    let before = answer(&server).await;
    let info = server.get("/model_info").await.json();
    let bad = fresh_dir("fail-bad");
    std::fs::write(
        bad.join("config.json"),
        json!({"architectures": [mock_server::model::ARCHITECTURE]}).to_string(),
    )
    .unwrap();
    let path = bad.display().to_string();
    let zeros = |n: usize| vec![0u8; n];
    let rollback = "\nRolling back to original weights.";
    type Write = Box<dyn Fn(&std::path::Path)>;
    let cases: Vec<(Write, String)> = vec![
        (
            Box::new(|_| {}),
            format!("Failed to get weights iterator: Cannot find any model weights with `{path}`."),
        ),
        (
            Box::new(move |d| {
                write_tensor(
                    d,
                    "lm_head.weight",
                    "F32",
                    [8, SLOTS],
                    &zeros(4 * 8 * SLOTS),
                )
            }),
            format!("Failed to update weights: 'lm_head.weight'.{rollback}"),
        ),
        (
            Box::new(move |d| {
                write_tensor(d, TENSOR_NAME, "F32", [4, SLOTS], &zeros(4 * 4 * SLOTS))
            }),
            format!(
                "Failed to update weights: Attempted to load weight (torch.Size([4, 9])) into parameter \
                 (torch.Size([8, 9])).{rollback}"
            ),
        ),
        (
            Box::new(move |d| {
                write_tensor(d, TENSOR_NAME, "I64", [8, SLOTS], &zeros(8 * 8 * SLOTS))
            }),
            format!(
                "Failed to update weights: `logit_offsets` must be a floating-point tensor (F16, BF16, F32 or \
                 F64), got I64.{rollback}"
            ),
        ),
    ];
    for (write, message) in cases {
        let _ = std::fs::remove_file(bad.join("model.safetensors"));
        write(&bad);
        let reply = update(&server, &path, Some("never")).await;
        assert_eq!(reply.status, 400, "{message}");
        assert_eq!(
            reply.json(),
            json!({"success": false, "message": message, "num_paused_requests": 0})
        );
        assert_eq!(server.get("/model_info").await.json(), info, "{message}");
        assert_eq!(
            answer(&server).await,
            before,
            "{message}: the old weights serve"
        );
    }
    // A header that is not JSON fails while reading, before anything is loaded.
    std::fs::write(bad.join("model.safetensors"), b"\x08\0\0\0\0\0\0\0not json").unwrap();
    let reply = update(&server, &path, None).await;
    assert_eq!(reply.status, 400);
    let message = reply.json()["message"].as_str().unwrap().to_owned();
    assert!(
        message.starts_with("Failed to update weights: Error while deserializing header: "),
        "{message}"
    );
    assert_eq!(answer(&server).await, before);
}

/// A directory that is no toy policy (a tokenizer's, or a real model's) carries weights the toy model has no
/// parameters for: a server that serves none updates the version only, as before weights existed.
#[tokio::test]
async fn a_server_without_a_policy_directory_updates_the_version_only() {
    let server = InProcess::new(ServerConfig::default());
    let before = answer(&server).await;
    let foreign = fresh_dir("foreign");
    std::fs::write(
        foreign.join("config.json"),
        r#"{"architectures": ["Qwen2ForCausalLM"]}"#,
    )
    .unwrap();
    let reply = update(&server, &foreign.display().to_string(), Some("v1")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(answer(&server).await, before);
    assert!(
        server
            .get("/model_info")
            .await
            .json()
            .get("policy")
            .is_none()
    );
}

/// A rollout whose logprobs were recomputed under the weights before the update (what a worker that missed the
/// sync serves) is named stale by the live server's audit, which keeps the weights it served before.
#[tokio::test]
async fn logprobs_under_the_weights_before_an_update_are_named_stale_by_the_audit() {
    let (a, b) = (policy(1.0), policy(-1.5));
    let (dir_a, dir_b) = (policy_dir("stale-a", &a), policy_dir("stale-b", &b));
    let server = InProcess::new(ServerConfig {
        model_path: dir_a.display().to_string(),
        ledger: true,
        ..ServerConfig::default()
    });
    answer(&server).await;
    let reply = update(&server, &dir_b.display().to_string(), Some("step-1")).await;
    assert_eq!(reply.status, 200);
    let (ids, served) = answer(&server).await;
    let prompt = Model::new(ServerConfig::default().model_config())
        .expect("the default model")
        .tokenizer()
        .encode("Hello world");
    let audit = |logprobs: Vec<f32>| {
        let sample =
            json!({"input_tokens": prompt, "output_tokens": ids, "output_logprobs": logprobs});
        server.post("/admin/audit", json!([sample]).to_string())
    };
    let report = audit(served).await.json();
    assert_eq!(report["ok"], true, "{report:#}");
    let stale = expected(&a, &ids);
    let report = audit(stale.clone()).await.json();
    assert_eq!(
        sole_problem(&report),
        (&json!("logprob-stale"), &json!(0), &json!(ids.len())),
        "{report:#}"
    );
    let message = report["problems"][0]["message"]
        .as_str()
        .expect("a message");
    assert!(
        message.contains(&format!(
            "{} is the model's logprob of this token under the server's weights 0 (version \"default\"), \
             while rid",
            stale[0]
        )),
        "{message}"
    );
    assert!(
        message.contains("generated it under weights 1 (version \"step-1\")"),
        "{message}"
    );
    // After a reset the ledger and the weights served before are gone: nothing is left to explain the tokens.
    server.reset().await;
    let report = audit(stale).await.json();
    assert_eq!(
        report["problems"][0]["kind"], "never-generated",
        "{report:#}"
    );
}
