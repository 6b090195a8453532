//! Criterion benchmarks of the GRPO pipeline over 512 samples of 2,048 tokens, in tokens per second:
//! advantages, PPO loss with aggregation, both together, and a plain copy of the inputs as the ceiling.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use grpo::{
    AdvantageConfig, Aggregation, Batch, BatchOptions, LogProbs, PolicyLossConfig, SampleParts,
};

const SAMPLES: usize = 512;
const LENGTH: usize = 2048;
const GROUP: usize = 8;

/// A small deterministic generator (64-bit LCG, top 24 bits as a uniform in [0, 1)).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Rewards in {0, 1}, ~90% of tokens trained, rollout logprobs in (-5, 0], current = rollout + noise.
fn data() -> (Batch, Vec<f32>) {
    let mut rng = Lcg(1976);
    let mut current = Vec::with_capacity(SAMPLES * LENGTH);
    let parts: Vec<SampleParts> = (0..SAMPLES)
        .map(|_| {
            let reward = f64::from(u8::from(rng.next() < 0.5));
            let mask = (0..LENGTH).map(|_| u8::from(rng.next() < 0.9)).collect();
            let lp: Vec<f32> = (0..LENGTH).map(|_| -5.0 * rng.next()).collect();
            current.extend(lp.iter().map(|&l| l + 0.4 * (rng.next() - 0.5)));
            SampleParts {
                reward: Some(reward),
                response_length: LENGTH,
                loss_mask: Some(mask),
                rollout_log_probs: Some(lp),
                ..SampleParts::default()
            }
        })
        .collect();
    (
        Batch::new(&parts, &BatchOptions::grpo(GROUP)).expect("valid batch"),
        current,
    )
}

fn pipeline(c: &mut Criterion) {
    let (batch, current) = data();
    let adv_config = AdvantageConfig::default();
    let loss_config = PolicyLossConfig {
        use_rollout_log_probs: true,
        eps_clip_high: 0.28,
        dual_clip: Some(3.0),
        aggregation: Aggregation::SeqMeanTokenMean,
        ..PolicyLossConfig::default()
    };
    let advantages = batch.advantages(&adv_config);
    let lp = LogProbs::new(&current);

    let mut group = c.benchmark_group("grpo_512x2048");
    group.throughput(Throughput::Elements(batch.num_tokens() as u64));
    group.bench_function("advantages", |b| {
        b.iter(|| black_box(batch.advantages(black_box(&adv_config))))
    });
    group.bench_function("ppo_loss_and_aggregation", |b| {
        b.iter(|| {
            black_box(batch.policy_loss(black_box(&advantages), black_box(&lp), &loss_config))
        })
    });
    group.bench_function("pipeline", |b| {
        b.iter(|| {
            let advantages = batch.advantages(black_box(&adv_config));
            black_box(batch.policy_loss(&advantages, black_box(&lp), &loss_config))
        })
    });
    let rollout = batch.rollout_log_probs().expect("present");
    let (mut c2, mut r2, mut m2) = (
        vec![0.0f32; current.len()],
        vec![0.0f32; rollout.len()],
        vec![0u8; rollout.len()],
    );
    group.bench_function("memcpy_inputs", |b| {
        b.iter(|| {
            c2.copy_from_slice(black_box(&current));
            r2.copy_from_slice(black_box(rollout));
            m2.copy_from_slice(black_box(batch.loss_mask()));
            black_box((&c2, &r2, &m2));
        })
    });
    group.finish();
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
