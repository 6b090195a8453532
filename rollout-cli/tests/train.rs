//! `rollout train` on the embedded mock: the loop learns, every importance ratio at the rollout policy is
//! exactly 1, every step's samples carry the version of the weights they were generated under, and a server that
//! cannot load the weights stops the run with its message.

use mock_server::model::{Model, ModelConfig, Policy};
use mock_server::{Server, ServerConfig};
use rollout_cli::train::{self, StepRecord, Task, TrainConfig, TrainError};
use rollout_client::Client;

fn config(steps: usize, temperature: f64) -> TrainConfig {
    TrainConfig {
        steps,
        prompts: 8,
        n: 8,
        max_new_tokens: 24,
        temperature,
        lr: 0.3,
        seed: 5,
        ignore_eos: false,
    }
}

/// An embedded mock on a free port serving the toy policy directory `dir`.
async fn serving(dir: &std::path::Path) -> Server {
    Server::start(ServerConfig {
        host: "127.0.0.1".to_owned(),
        port: 0,
        model_path: dir.display().to_string(),
        ..ServerConfig::default()
    })
    .await
    .expect("the mock starts")
}

/// Serves the toy policy from a fresh directory and runs the loop against it.
async fn run(
    name: &str,
    config: &TrainConfig,
) -> (
    Result<(Vec<StepRecord>, Policy), TrainError>,
    Vec<StepRecord>,
) {
    let out = std::env::temp_dir().join(format!("rollout-train-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let start = train::weights_dir(&out, 0);
    mock_server::model::save_dir(&Policy::zero(8), 151_936, &start).unwrap();
    let server = serving(&start).await;
    let client = Client::builder(server.url()).build().unwrap();
    let model = Model::new(ModelConfig::default()).unwrap();
    let mut seen = Vec::new();
    let result = train::train(&client, &model, config, &out, |r| {
        seen.push(r.clone());
        Ok(())
    })
    .await;
    let _ = server.shutdown().await;
    (result, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_learns_with_every_ratio_exactly_one_at_the_rollout_policy() {
    for temperature in [1.0, 0.8] {
        let (result, seen) = run(&format!("learns-{temperature}"), &config(12, temperature)).await;
        let (records, policy) = result.expect("the loop runs");
        assert_eq!(records, seen, "every step is reported as it finishes");
        for r in &records {
            assert_eq!(
                r.max_abs_ratio_minus_one, 0.0,
                "T={temperature} step {}: {r:?}",
                r.step
            );
            assert_eq!(r.weight_version, r.step.to_string());
            assert!(
                r.kl_to_previous > 0.0,
                "step {}: the update moved nothing",
                r.step
            );
            assert_eq!(r.samples, 64);
        }
        let (first, last) = (records[0].reward_mean, records[11].reward_mean);
        assert!(
            last > first + 0.2,
            "T={temperature}: the reward mean went from {first:.3} to {last:.3} in 12 steps"
        );
        assert!(!policy.is_zero());
    }
}

#[tokio::test]
async fn the_task_rewards_words_of_the_first_eighth_of_the_word_range() {
    let task = Task::new(151_936);
    let block = ((151_936 - 259) / 8) & !1;
    assert_eq!(
        task.reward(&[256, 256 + block - 1, 256 + block, 46, 151_935]),
        0.5
    );
    assert_eq!(task.reward(&[151_935]), 0.0);
    assert_eq!(task.reward(&[]), 0.0);
    let prompts = task.prompts(4);
    assert_eq!(prompts.len(), 4);
    assert!(
        prompts
            .iter()
            .all(|p| p[0] == 151_934 && p.ends_with(&[151_935, 151_934]))
    );
}

/// A server whose model has another shape (four buckets where the trainer writes eight) refuses the update with
/// its loader's message, and the loop stops there, before any step trains on weights the server does not serve;
/// an output directory that cannot be written stops it before anything is sent.
#[tokio::test]
async fn an_update_the_server_refuses_stops_the_loop_with_its_message() {
    let dir = std::env::temp_dir().join(format!("rollout-train-four-{}", std::process::id()));
    mock_server::model::save_dir(&Policy::zero(4), 151_936, &dir).unwrap();
    let server = serving(&dir).await;
    let client = Client::builder(server.url()).build().unwrap();
    let model = Model::new(ModelConfig::default()).unwrap();
    let out = std::env::temp_dir().join(format!("rollout-train-refused-{}", std::process::id()));
    let err = train::train(&client, &model, &config(2, 1.0), &out, |_| Ok(()))
        .await
        .unwrap_err();
    let TrainError::Update { step: 0, source } = &err else {
        panic!("{err}");
    };
    assert!(
        source.to_string().contains(
            "Failed to update weights: Attempted to load weight (torch.Size([8, 9])) into parameter \
             (torch.Size([4, 9]))"
        ),
        "{source}"
    );
    let file = std::env::temp_dir().join(format!("rollout-train-file-{}", std::process::id()));
    std::fs::write(&file, b"not a directory").unwrap();
    let err = train::train(&client, &model, &config(2, 1.0), &file, |_| Ok(()))
        .await
        .unwrap_err();
    assert!(matches!(err, TrainError::Write { .. }), "{err}");
    let _ = server.shutdown().await;
}
