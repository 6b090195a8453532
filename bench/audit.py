#!/usr/bin/env python3
"""How long the witness takes on a real batch: 1,000 samples of 4,096 response tokens, audited from Python.

Starts the release `sglang-mock` with its ledger on, generates the batch through `/generate` (one answer of 4,096
tokens per sample; `--turns 4` makes each sample four answers of 1,019 or so tokens with 5 environment tokens
between them, each turn's prompt the whole context before it), builds slime-style samples from the answers as a
trainer keeps them, then times, in interleaved rounds:

  - `MockServer.audit(samples)` with the samples' columns as Python lists (what most rollout code holds): the
    package turns them into typed arrays, posts them, the server reads and audits them, the report comes back;
  - the same with NumPy arrays (what a trainer holds after `torch.tensor(...).numpy()`);
  - `json.dumps` of the batch of lists posted to `/admin/audit` (what code that skips the package sends);
  - `POST /admin/audit` of the batch as JSON lines of lists (what `sglang-mock audit` or `curl` sends for a dump),
    the server's part alone.

Every round's report must be `ok`: a benchmark of a wrong answer measures nothing. The server's resident memory
(`VmRSS`) is read before the batch, after generating it, and after each audit, and the report says where it
settled. `--short N1,N2,...` then measures what the package's encoding costs for short samples: batches of the
same number of tokens in samples of each length, audited with the columns packed as typed arrays and sent as the
plain JSON lists, interleaved, the ratio per length (where packing stops paying is where `witness.py` packs from).
Needs the package's source (`python/src`) and numpy.

    python3 bench/audit.py [--samples 1000] [--tokens 4096] [--turns 1] [--rounds 3] [--short 16,64,256,1024]
"""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "src"))

import sglang_mock  # noqa: E402  (the source tree's package, beside this checkout's binary)
from sglang_mock import witness  # noqa: E402

ENV = [300, 301, 302, 303, 304]


def post(url: str, path: str, body: bytes) -> bytes:
    request = urllib.request.Request(url + path, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return response.read()


def sample(url: str, k: int, tokens: int, turns: int) -> dict:
    """One slime sample: `turns` answers with environment tokens between them, `tokens` response tokens."""
    prompt = [1000 + (k * 64 + i) % 140000 for i in range(64)]
    response, mask, logprobs = [], [], []
    per_turn = (tokens - len(ENV) * (turns - 1)) // turns
    for turn in range(turns):
        if turn:
            response += ENV
            mask += [0] * len(ENV)
            logprobs += [0.0] * len(ENV)
        n = tokens - len(response) if turn + 1 == turns else per_turn
        body = {"input_ids": prompt + response, "return_logprob": True,
                "sampling_params": {"max_new_tokens": n, "ignore_eos": True}}
        entries = json.loads(post(url, "/generate", json.dumps(body).encode()))["meta_info"]["output_token_logprobs"]
        response += [e[1] for e in entries]
        mask += [1] * len(entries)
        logprobs += [e[0] for e in entries]
    return {"index": k, "tokens": prompt + response, "response_length": len(response), "loss_mask": mask,
            "rollout_log_probs": logprobs}


def rss_mib(pid: int) -> float:
    """The process's resident memory, from `/proc`."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def short_samples(server, lengths, total, rounds) -> list:
    """Batches of `total` tokens in samples of each length, audited through the package with every column packed
    as a typed array, with every column a plain list, as the package ships (`witness._PACK_FROM`), and as
    `json.dumps` of the batch posted: interleaved, the table's lines."""
    modes = (("arrays", 0), ("lists", float("inf")), ("package", witness._PACK_FROM))
    lines = [f"| tokens per sample | samples | typed arrays (s) | plain lists (s) | the package, packing from "
             f"{witness._PACK_FROM} (s) | `json.dumps` + POST (s) | lists / arrays | package / best |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in lengths:
        count = max(1, total // n)
        with ThreadPoolExecutor(max_workers=8) as pool:
            batch = list(pool.map(lambda k: sample(server.url, 10_000_000 + n * 100_000 + k, n, 1), range(count)))
        best = {}
        for _ in range(rounds):
            start = time.perf_counter()
            report = json.loads(post(server.url, "/admin/audit", json.dumps({"samples": batch}).encode()))
            best["dumps"] = min(best.get("dumps", float("inf")), time.perf_counter() - start)
            assert report["ok"], report["text"]
            for name, pack_from in modes:
                saved = witness._PACK_FROM
                witness._PACK_FROM = pack_from
                try:
                    start = time.perf_counter()
                    report = server.audit(batch)
                    seconds = time.perf_counter() - start
                finally:
                    witness._PACK_FROM = saved
                assert report.ok, str(report)
                best[name] = min(best.get(name, float("inf")), seconds)
        lines.append(f"| {n:,} | {count:,} | {best['arrays']:.3f} | {best['lists']:.3f} | {best['package']:.3f} | "
                     f"{best['dumps']:.3f} | {best['lists'] / best['arrays']:.2f} | "
                     f"{best['package'] / min(best['arrays'], best['lists']):.2f} |")
        server_reset(server)
    return lines


def server_reset(server) -> None:
    post(server.url, "/admin/reset", b"{}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--short", default="", help="comma-separated sample lengths for the encoding comparison")
    parser.add_argument("--short-total", type=int, default=1 << 20, help="tokens per batch of the comparison")
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "-p", "mock-server", "--bin", "sglang-mock"], cwd=ROOT,
                   check=True)
    os.environ["SGLANG_MOCK_BINARY"] = os.path.join(ROOT, "target", "release", "sglang-mock")
    with sglang_mock.serve(ledger_max_mib=16384) as server:
        rss = [("at start", rss_mib(server.pid))]
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=8) as pool:
            samples = list(pool.map(lambda k: sample(server.url, k, args.tokens, args.turns), range(args.samples)))
        print(f"generated {args.samples} samples of {args.tokens} tokens in {args.turns} turn(s): "
              f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
        arrays = [dict(s, tokens=np.array(s["tokens"], dtype=np.int64), loss_mask=np.array(s["loss_mask"], np.uint8),
                       rollout_log_probs=np.array(s["rollout_log_probs"], np.float32)) for s in samples]
        lines = "".join(json.dumps(s) + "\n" for s in samples).encode()
        ledger = json.loads(urllib.request.urlopen(server.url + "/admin/ledger", timeout=600).read())
        print(f"ledger: {ledger['entries']} entries, {ledger['bytes'] / 2**20:.1f} MiB "
              f"({ledger['bytes'] / args.samples / 1024:.1f} KiB per sample)", file=sys.stderr)
        del ledger
        rss.append(("after generating the batch", rss_mib(server.pid)))

        def lists():
            return server.audit(samples)

        def numpy_arrays():
            return server.audit(arrays)

        def json_lines():
            return json.loads(post(server.url, "/admin/audit", lines))

        def dumps():
            return json.loads(post(server.url, "/admin/audit", json.dumps({"samples": samples}).encode()))

        best = {}
        for round_ in range(args.rounds):
            for name, run in (("lists", lists), ("numpy", numpy_arrays), ("dumps", dumps), ("json lines", json_lines)):
                start = time.perf_counter()
                report = run()
                seconds = time.perf_counter() - start
                ok = report.ok if hasattr(report, "ok") else report["ok"]
                assert ok, str(report)
                best[name] = min(best.get(name, float("inf")), seconds)
                rss.append((f"after round {round_ + 1}'s {name}", rss_mib(server.pid)))
                print(f"round {round_ + 1}: {name}: {seconds:.3f} s, RSS {rss[-1][1]:.0f} MiB", file=sys.stderr)
        server_reset(server)
        rss.append(("after /admin/reset (the ledger emptied)", rss_mib(server.pid)))
        short = short_samples(server, [int(n) for n in args.short.split(",")], args.short_total,
                              args.rounds) if args.short else []
    tokens = args.samples * args.tokens
    print(f"\n{args.samples:,} samples of {args.tokens:,} tokens ({args.turns} turn(s) each), best of "
          f"{args.rounds} rounds\n")
    print("| audit from | seconds | tokens/s |")
    print("|---|---:|---:|")
    for name, label in (("lists", "Python lists (`MockServer.audit`)"), ("numpy", "NumPy arrays (`MockServer.audit`)"),
                        ("dumps", "Python lists, `json.dumps` and POST (no package)"),
                        ("json lines", "JSON lines of lists (`POST /admin/audit`, the server alone)")):
        print(f"| {label} | {best[name]:.3f} | {tokens / best[name] / 1e6:,.1f} M |")
    print("\n| server RSS | MiB |")
    print("|---|---:|")
    for when, mib in rss:
        print(f"| {when} | {mib:.0f} |")
    if short:
        print()
        print("\n".join(short))


if __name__ == "__main__":
    main()
