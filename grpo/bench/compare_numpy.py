#!/usr/bin/env python3
"""Times the grpo crate against numpy on the same data, in the same run, and checks that both agree.

The pipeline is slime's default GRPO step: group advantages (mean and unbiased std per group of n,
epsilon 1e-6), the PPO clipped loss with the rollout logprobs as the old policy (eps 0.2 / 0.28, dual
clip 3), and seq-mean-token-mean aggregation of the loss, the clip fraction and ppo_kl.

The script writes the data (seeded numpy generator) as raw little-endian arrays into a temporary folder,
runs `cargo run --release -p grpo --example pipeline` on it (the example times the Rust pipeline and a plain
copy of the same input bytes with a best-of-N loop), times the numpy implementation below with the same
best-of-N loop, checks that the numbers agree, and prints a markdown table.

The Rust side runs three times: the default build, whose kernel picks its AVX-512, AVX2 + FMA or baseline
copy at run time from the CPU's features (as numpy does); the same build with GRPO_DISPATCH=fallback, which
forces the copy compiled for the build's target (SSE2 on x86-64: what the crate ran before it dispatched);
and a build with `-C target-cpu=native` in target/grpo-native (skip it with --no-native). The dispatched
and the fallback runs must agree bit for bit.

Usage (from anywhere in the workspace; numpy is the only dependency):
    python3 grpo/bench/compare_numpy.py [--samples 512] [--length 2048] [--group-size 8] [--repeats 20]
"""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError:
    sys.exit("compare_numpy.py needs numpy: pip install numpy")

WORKSPACE = pathlib.Path(__file__).resolve().parents[2]


def make_data(samples, length, seed):
    """Rewards in {0, 1} (a 0/1 verifier such as deepscaler); ~90% of tokens trained; rollout logprobs <= 0;
    current = rollout + noise.

    0/1 rewards keep group means exact in any summation order. With rewards such as 0.8 and 1.2, a sample
    whose reward equals its group mean can get an advantage of +-1e-16 or exactly 0 depending on the order of
    the additions, and its clip indicator then differs on every token: numpy and the crate would disagree on
    pg_clipfrac while agreeing on everything that matters.
    """
    rng = np.random.default_rng(seed)
    tokens = samples * length
    rewards = rng.integers(0, 2, size=samples).astype(np.float64)
    lengths = np.full(samples, length, dtype=np.uint32)
    mask = (rng.random(tokens) < 0.9).astype(np.uint8)
    rollout = (-rng.exponential(1.0, tokens)).astype(np.float32)
    current = (rollout + rng.normal(0.0, 0.2, tokens)).astype(np.float32)
    return rewards, lengths, mask, rollout, current


def numpy_pipeline(rewards, mask, rollout, current, n, length):
    """The same formulas as the Rust pipeline: float32 per token, float64 reductions."""
    r = rewards.reshape(-1, n)
    # The mean relative to each group's first reward, as the crate computes it: exact for a constant group,
    # whose advantages are then exactly 0. (A plain mean leaves about 1e-11 for rewards like 0.8, which the
    # clip test then counts as clipped on every token with a ratio outside the range.)
    pivot = r[:, :1]
    mean = pivot + (r - pivot).mean(axis=1, keepdims=True)
    std = r.std(axis=1, ddof=1, keepdims=True)
    advantages = ((r - mean) / (std + 1e-6)).reshape(-1)

    shape = (rewards.shape[0], length)
    adv = np.broadcast_to(advantages.astype(np.float32)[:, None], shape)
    m = mask.reshape(shape).astype(np.float32)
    log_ratio = current.reshape(shape) - rollout.reshape(shape)
    ratio = np.exp(np.clip(log_ratio, -20.0, 20.0))
    pg1 = -adv * ratio
    pg2 = -adv * np.clip(ratio, np.float32(1.0) - np.float32(0.2), np.float32(1.0) + np.float32(0.28))
    clip_max = np.maximum(pg1, pg2)
    clipped = (pg2 > pg1).astype(np.float32)
    loss = np.where(adv < 0, np.minimum(-adv * np.float32(3.0), clip_max), clip_max)

    den = np.maximum(m.sum(axis=1, dtype=np.float64), 1.0)

    def agg(x):
        return float(((x * m).sum(axis=1, dtype=np.float64) / den).mean())

    return advantages, {"pg_loss": agg(loss), "pg_clipfrac": agg(clipped), "ppo_kl": agg(-log_ratio)}


def best_of(repeats, f):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=20, help="numpy repetitions (best of)")
    parser.add_argument("--rust-repeats", type=int, default=200,
                        help="Rust repetitions (best of); the default gives both sides about the same wall time")
    parser.add_argument("--seed", type=int, default=1976)
    parser.add_argument("--no-native", action="store_true",
                        help="skip the second Rust build with -C target-cpu=native")
    args = parser.parse_args()

    rewards, lengths, mask, rollout, current = make_data(args.samples, args.length, args.seed)
    tokens = int(lengths.sum())

    def time_numpy():
        return best_of(args.repeats,
                       lambda: numpy_pipeline(rewards, mask, rollout, current, args.group_size, args.length))

    # numpy is timed before and after the Rust runs, and the better time kept: the machine is shared, and a
    # burst of load during one side's timing should not decide the ratio.
    t_numpy_before = time_numpy()
    with tempfile.TemporaryDirectory(prefix="grpo-bench-") as tmp:
        d = pathlib.Path(tmp)
        rewards.astype("<f8").tofile(d / "rewards.f64")
        lengths.astype("<u4").tofile(d / "response_lengths.u32")
        mask.tofile(d / "loss_mask.u8")
        rollout.astype("<f4").tofile(d / "rollout_log_probs.f32")
        current.astype("<f4").tofile(d / "current_log_probs.f32")

        builds = [("default build, kernel chosen at run time", {}),
                  ("default build, forced fallback (`GRPO_DISPATCH=fallback`, SSE2)",
                   {"GRPO_DISPATCH": "fallback"})]
        if not args.no_native:
            # A separate target folder, so the shared one keeps its default-flag artefacts.
            builds.append(("`-C target-cpu=native`", {"RUSTFLAGS": "-C target-cpu=native",
                                                      "CARGO_TARGET_DIR": str(WORKSPACE / "target" / "grpo-native")}))
        runs = []
        for name, env in builds:
            cmd = ["cargo", "run", "--quiet", "--release", "-p", "grpo", "--example", "pipeline", "--",
                   str(d), str(args.group_size), str(args.rust_repeats)]
            subprocess.run(cmd, cwd=WORKSPACE, check=True, stdout=subprocess.DEVNULL, env={**os.environ, **env})
            rust = {}
            for line in (d / "rust_results.txt").read_text().splitlines():
                key, value = line.split()
                rust[key] = float(value)
            runs.append((name, rust, np.fromfile(d / "rust_advantages.f64", dtype="<f8")))

    np_adv, np_out = numpy_pipeline(rewards, mask, rollout, current, args.group_size, args.length)
    t_numpy = min(t_numpy_before, time_numpy())

    # Same numbers: per-sample advantages to 1e-9 (both f64), aggregated metrics to 1e-5 relative (f32 tokens).
    failures = []
    for name, rust, rust_adv in runs:
        if not np.allclose(rust_adv, np_adv, rtol=0, atol=1e-9):
            failures.append(f"{name}: advantages differ by up to {np.max(np.abs(rust_adv - np_adv)):.3e}")
        for key, value in np_out.items():
            if not np.isclose(rust[key], value, rtol=1e-5, atol=1e-7):
                failures.append(f"{name}: {key}: rust {rust[key]!r} vs numpy {value!r}")
        if rust["tokens"] != tokens:
            failures.append(f"{name}: token count {rust['tokens']} vs {tokens}")
    # The dispatched kernel and the fallback compute the same operations in the same order: same bits. The
    # example prints each float in its shortest round-trip form, so the parsed floats are the Rust values;
    # `hex` tells -0.0 from 0.0, which `==` does not.
    (dispatched, rust_d, adv_d), (fallback, rust_f, adv_f) = runs[0], runs[1]
    if adv_d.tobytes() != adv_f.tobytes():
        failures.append(f"{dispatched} and {fallback}: advantages differ")
    for key in ("loss", "pg_loss", "pg_clipfrac", "ppo_kl"):
        if rust_d[key].hex() != rust_f[key].hex():
            failures.append(f"{dispatched} and {fallback}: {key} {rust_d[key]!r} vs {rust_f[key]!r}")

    print(f"{args.samples} samples x {args.length} tokens = {tokens:,} tokens, groups of {args.group_size}, "
          f"best of {args.repeats} (numpy) and {args.rust_repeats} (Rust); numpy {np.__version__}")
    print("agreement: " + ("OK (advantages within 1e-9; pg_loss, pg_clipfrac and ppo_kl within 1e-5 relative; "
                           "dispatched and fallback bit for bit)" if not failures else "FAILED"))
    for f in failures:
        print("  " + f)
    print()
    print("| what | time per batch | tokens/s | numpy time / this | this time / memcpy time |")
    print("|---|---:|---:|---:|---:|")
    t_copy = runs[0][1]["time_memcpy_s"]
    rows = [("numpy (advantages + PPO loss + aggregation)", t_numpy)]
    for name, rust, _ in runs:
        rows.append((f"grpo crate, same pipeline, {name}", rust["time_pipeline_s"]))
    rows.append(("grpo `Batch::new` (validation + flat layout; not in the pipeline)", runs[0][1]["time_batch_new_s"]))
    rows.append((f"memcpy of the pipeline's inputs ({int(runs[0][1]['memcpy_bytes']) / 1e6:.1f} MB; the ceiling)",
                 t_copy))
    for name, t in rows:
        print(f"| {name} | {t * 1e3:.2f} ms | {tokens / t / 1e6:.0f} M | {t_numpy / t:.1f}x | {t / t_copy:.1f}x |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
