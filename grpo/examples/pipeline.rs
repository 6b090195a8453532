//! Times the GRPO pipeline (advantages + PPO loss + aggregation) on data written by
//! `bench/compare_numpy.py`, next to a plain copy of the same input bytes, and writes the results for the
//! script to compare with numpy.
//!
//! Usage: `cargo run --release -p grpo --example pipeline -- DATA_DIR GROUP_SIZE REPEATS`.
//!
//! `GRPO_DISPATCH=fallback` in the environment runs the kernel's copy for the build's own target
//! ([`Dispatch::Fallback`]) instead of the one chosen from the CPU's features; any other value, or none,
//! leaves the choice to the crate.
//!
//! `DATA_DIR` holds little-endian raw arrays: `rewards.f64` (one per sample), `response_lengths.u32`,
//! `loss_mask.u8`, `rollout_log_probs.f32` and `current_log_probs.f32` (flat, sample after sample). The
//! example writes `rust_advantages.f64` (per-sample advantages) and `rust_results.txt` (`key value` lines).

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use grpo::{
    AdvantageConfig, Aggregation, Batch, BatchOptions, Dispatch, LogProbs, PolicyLossConfig,
    PolicyLossOutput, SampleParts,
};

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.join(name).display()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// The benchmark's loss settings; `compare_numpy.py` implements the same.
fn loss_config(dispatch: Dispatch) -> PolicyLossConfig {
    PolicyLossConfig {
        use_rollout_log_probs: true,
        eps_clip: 0.2,
        eps_clip_high: 0.28,
        dual_clip: Some(3.0),
        aggregation: Aggregation::SeqMeanTokenMean,
        dispatch,
        ..PolicyLossConfig::default()
    }
}

fn pipeline(batch: &Batch, current: &[f32], dispatch: Dispatch) -> (Vec<f64>, PolicyLossOutput) {
    let advantages = batch.advantages(&AdvantageConfig::default());
    let out = batch
        .policy_loss(&advantages, &LogProbs::new(current), &loss_config(dispatch))
        .expect("valid inputs");
    (advantages.per_sample().to_vec(), out)
}

/// Best wall time of `repeats` runs of `f`.
fn best_of(repeats: usize, mut f: impl FnMut()) -> Duration {
    (0..repeats)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, n, repeats] = args.as_slice() else {
        panic!("usage: pipeline DATA_DIR GROUP_SIZE REPEATS");
    };
    let dir = Path::new(dir);
    let n: usize = n.parse().expect("GROUP_SIZE is an integer");
    let repeats: usize = repeats.parse().expect("REPEATS is an integer");
    let dispatch = match std::env::var("GRPO_DISPATCH").as_deref() {
        Ok("fallback") => Dispatch::Fallback,
        _ => Dispatch::Detect,
    };

    let rewards: Vec<f64> = read(dir, "rewards.f64")
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect();
    let lengths: Vec<usize> = read(dir, "response_lengths.u32")
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .collect();
    let mask = read(dir, "loss_mask.u8");
    let rollout = f32s(&read(dir, "rollout_log_probs.f32"));
    let current = f32s(&read(dir, "current_log_probs.f32"));

    let mut parts = Vec::with_capacity(rewards.len());
    let mut offset = 0;
    for (&reward, &len) in rewards.iter().zip(&lengths) {
        parts.push(SampleParts {
            reward: Some(reward),
            response_length: len,
            loss_mask: Some(mask[offset..offset + len].to_vec()),
            rollout_log_probs: Some(rollout[offset..offset + len].to_vec()),
            ..SampleParts::default()
        });
        offset += len;
    }
    let options = BatchOptions::grpo(n);
    let batch = Batch::new(&parts, &options).expect("valid batch");

    let (advantages, out) = pipeline(&batch, &current, dispatch);
    let t_pipeline = best_of(repeats, || {
        black_box(pipeline(black_box(&batch), black_box(&current), dispatch));
    });
    let t_batch = best_of(repeats, || {
        black_box(Batch::new(black_box(&parts), &options).expect("valid batch"));
    });
    // The ceiling: copying the pipeline's input bytes (current and rollout logprobs, mask, rewards).
    let (mut c2, mut r2, mut m2, mut w2) = (
        vec![0.0f32; current.len()],
        vec![0.0f32; rollout.len()],
        vec![0u8; mask.len()],
        vec![0.0f64; rewards.len()],
    );
    let t_memcpy = best_of(repeats, || {
        c2.copy_from_slice(black_box(&current));
        r2.copy_from_slice(black_box(&rollout));
        m2.copy_from_slice(black_box(&mask));
        w2.copy_from_slice(black_box(&rewards));
        black_box((&c2, &r2, &m2, &w2));
    });

    let adv_bytes: Vec<u8> = advantages.iter().flat_map(|a| a.to_le_bytes()).collect();
    std::fs::write(dir.join("rust_advantages.f64"), adv_bytes).expect("write advantages");
    let results = format!(
        "tokens {}\nloss {:e}\npg_loss {:e}\npg_clipfrac {:e}\nppo_kl {:e}\n\
         time_pipeline_s {:e}\ntime_memcpy_s {:e}\ntime_batch_new_s {:e}\nmemcpy_bytes {}\n",
        batch.num_tokens(),
        out.loss,
        out.pg_loss,
        out.pg_clipfrac,
        out.ppo_kl,
        t_pipeline.as_secs_f64(),
        t_memcpy.as_secs_f64(),
        t_batch.as_secs_f64(),
        current.len() * 4 + rollout.len() * 4 + mask.len() + rewards.len() * 8,
    );
    std::fs::write(dir.join("rust_results.txt"), &results).expect("write results");
    print!("{results}");
}
