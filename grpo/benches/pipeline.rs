//! Criterion benchmarks of the GRPO pipeline over 512 samples of 2,048 tokens, in tokens per second:
//! advantages, PPO loss with aggregation, both together, and a plain copy of the inputs as the ceiling; then
//! the pipeline with the kernel chosen from the CPU's features against the build target's copy.

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use grpo::{
    AdvantageConfig, Aggregation, Batch, BatchOptions, Dispatch, LogProbs, PolicyLossConfig,
    SampleParts,
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

/// The benchmark's loss settings, with the kernel copy `dispatch` selects.
fn loss_config(dispatch: Dispatch) -> PolicyLossConfig {
    PolicyLossConfig {
        use_rollout_log_probs: true,
        eps_clip_high: 0.28,
        dual_clip: Some(3.0),
        aggregation: Aggregation::SeqMeanTokenMean,
        dispatch,
        ..PolicyLossConfig::default()
    }
}

/// Copies the pipeline's per-token inputs (current and rollout logprobs, mask) into `out`.
fn copy_inputs(batch: &Batch, current: &[f32], out: &mut (Vec<f32>, Vec<f32>, Vec<u8>)) {
    let rollout = batch.rollout_log_probs().unwrap_or_default();
    out.0.copy_from_slice(black_box(current));
    out.1.copy_from_slice(black_box(rollout));
    out.2.copy_from_slice(black_box(batch.loss_mask()));
    black_box(&*out);
}

/// Buffers for [`copy_inputs`].
fn copy_buffers(batch: &Batch) -> (Vec<f32>, Vec<f32>, Vec<u8>) {
    let n = batch.num_tokens();
    (vec![0.0; n], vec![0.0; n], vec![0; n])
}

/// One pass of the pipeline: GRPO advantages, then the policy loss with its aggregation.
fn run_pipeline(
    batch: &Batch,
    adv_config: &AdvantageConfig,
    lp: &LogProbs<'_>,
    loss_config: &PolicyLossConfig,
) {
    let advantages = batch.advantages(black_box(adv_config));
    let _ = black_box(batch.policy_loss(&advantages, black_box(lp), loss_config));
}

/// The copy of the pipeline's inputs, the ceiling a group's other rows are read against.
fn bench_copy(group: &mut BenchmarkGroup<'_, WallTime>, batch: &Batch, current: &[f32]) {
    let mut copies = copy_buffers(batch);
    group.bench_function("memcpy_inputs", |b| {
        b.iter(|| copy_inputs(batch, current, &mut copies))
    });
}

fn pipeline(c: &mut Criterion) {
    let (batch, current) = data();
    let adv_config = AdvantageConfig::default();
    let loss_config = loss_config(Dispatch::Detect);
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
        b.iter(|| run_pipeline(&batch, &adv_config, &lp, &loss_config))
    });
    bench_copy(&mut group, &batch, &current);
    group.finish();
}

/// The whole pipeline with the kernel copy chosen at run time (`Dispatch::Detect`, AVX-512 or AVX2 where the
/// CPU has them) and with the copy for the build's target (`Dispatch::Fallback`: SSE2 on a default x86-64
/// build), next to the copy of the inputs; both copies return the same bits.
fn dispatch(c: &mut Criterion) {
    let (batch, current) = data();
    let adv_config = AdvantageConfig::default();
    let lp = LogProbs::new(&current);
    let mut group = c.benchmark_group("dispatch");
    group.throughput(Throughput::Elements(batch.num_tokens() as u64));
    for (name, dispatch) in [
        ("pipeline_detect", Dispatch::Detect),
        ("pipeline_fallback", Dispatch::Fallback),
    ] {
        let loss_config = loss_config(dispatch);
        group.bench_function(name, |b| {
            b.iter(|| run_pipeline(&batch, &adv_config, &lp, &loss_config))
        });
    }
    bench_copy(&mut group, &batch, &current);
    group.finish();
}

criterion_group!(benches, pipeline, dispatch);
criterion_main!(benches);
