#!/usr/bin/env python3
"""Times slime's Python decode path against rollout-client's typed decoder on the same bytes.

Run from the workspace root:  python3 rollout-client/bench/compare_python.py [--reps N]

It builds and runs the `decode_bodies` example (release) to write the synthetic 4,096-token
/generate bodies to a temporary directory and time the Rust decoders, then times, on the very same
files and in the same run:
  * orjson:  d = orjson.loads(body); lp = d["meta_info"]["output_token_logprobs"];
             ids = [item[1] for item in lp]; lps = [item[0] for item in lp]   (slime's path)
  * json:    the same with the standard library's json.loads
and prints a markdown table of MB/s with the Rust/orjson ratio.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import orjson
except ImportError:  # the table still shows the stdlib path
    orjson = None


def slime_path(loads, body):
    d = loads(body)
    items = d["meta_info"]["output_token_logprobs"]
    ids = [item[1] for item in items]
    lps = [item[0] for item in items]
    return len(ids) + len(lps)


def best_mb_per_s(fn, body, reps):
    inner, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.02:
        fn(body)
        inner += 1
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            fn(body)
        best = min(best, (time.perf_counter() - t) / inner)
    return len(body) / best / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[2]
    run = ["cargo", "run", "--quiet", "--release", "-p", "rollout-client", "--example", "decode_bodies", "--"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(run + ["write", tmp], check=True, cwd=root)
        out = subprocess.run(run + ["time", tmp, str(args.reps)], check=True, cwd=root,
                             capture_output=True, text=True).stdout
        rust = {r["body"]: r for r in map(json.loads, out.splitlines())}
        print("| body | bytes | Rust typed (MB/s) | Rust `Value` (MB/s) | orjson + list comps (MB/s) "
              "| json + list comps (MB/s) | typed / orjson | typed / json |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, r in rust.items():
            body = (Path(tmp) / name).read_bytes()
            oj = best_mb_per_s(lambda b: slime_path(orjson.loads, b), body, args.reps) if orjson else float("nan")
            sj = best_mb_per_s(lambda b: slime_path(json.loads, b), body, args.reps)
            t = r["rust_typed_mb_s"]
            print(f"| {name} | {r['bytes']} | {t:.0f} | {r['rust_value_mb_s']:.0f} | {oj:.0f} | {sj:.0f} "
                  f"| {t / oj:.1f}x | {t / sj:.1f}x |")
    if orjson is None:
        print("\n(orjson is not installed: `pip install orjson` to time slime's path)", file=sys.stderr)


if __name__ == "__main__":
    main()
