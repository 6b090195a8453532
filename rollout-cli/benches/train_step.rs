//! Criterion benchmarks of one step of `rollout train` at 64 samples of 256 tokens (8 prompts, groups of 8,
//! answers run to their length): the trainer's half alone (recompute every token and its gradient, GRPO
//! advantages, the PPO loss and its gradient, back-propagation, Adam, the KL to the previous policy) on a
//! rollout recorded once, and the whole step against the embedded mock (rollout over HTTP, the trainer's half,
//! writing the weights and `/update_weights_from_disk`), in tokens per second.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mock_server::model::{Model, ModelConfig, Policy};
use mock_server::{Server, ServerConfig};
use rollout_cli::train::{self, TrainConfig, Trainer};
use rollout_client::Client;

const PROMPTS: usize = 8;
const GROUP: usize = 8;
const TOKENS: u32 = 256;

fn config() -> TrainConfig {
    TrainConfig {
        steps: 1,
        prompts: PROMPTS,
        n: GROUP,
        max_new_tokens: TOKENS,
        temperature: 1.0,
        lr: 0.3,
        seed: 0,
        ignore_eos: true,
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let out = std::env::temp_dir().join(format!("train-step-bench-{}", std::process::id()));
    let start = train::weights_dir(&out, 0);
    mock_server::model::save_dir(&Policy::zero(8), 151_936, &start).expect("the start weights");
    let server = runtime
        .block_on(Server::start(ServerConfig {
            host: "127.0.0.1".to_owned(),
            port: 0,
            model_path: start.display().to_string(),
            ..ServerConfig::default()
        }))
        .expect("the mock starts");
    let client = Client::builder(server.url()).build().expect("a client");
    let model = Model::new(ModelConfig::default()).expect("the model");
    let task = train::Task::new(151_936);
    let samples = runtime
        .block_on(train::rollout(
            &client,
            &task,
            &task.prompts(PROMPTS),
            &config(),
            0,
        ))
        .expect("a rollout");
    let tokens: usize = samples.iter().map(|s| s.response_length()).sum();
    assert_eq!(tokens, PROMPTS * GROUP * TOKENS as usize);

    let mut group = c.benchmark_group("train step, 64 x 256 tokens");
    group.throughput(Throughput::Elements(tokens as u64));
    group.sample_size(20);
    group.bench_function("trainer's half", |b| {
        b.iter(|| {
            let mut trainer = Trainer::new(0.3);
            black_box(
                trainer
                    .update(&model, black_box(&samples), GROUP, 1.0, 0)
                    .expect("an update"),
            )
        })
    });
    group.bench_function("whole step (rollout, update, weight sync)", |b| {
        b.iter(|| {
            runtime
                .block_on(train::train(&client, &model, &config(), &out, |_| Ok(())))
                .expect("a step")
        })
    });
    group.finish();
    runtime.block_on(async { drop(server.shutdown().await) });
}

criterion_group!(benches, bench);
criterion_main!(benches);
