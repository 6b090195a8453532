#!/usr/bin/env python3
"""Loopback benchmark of `sglang-mock` against a Python mock and the ceiling of its own HTTP stack.

Each server runs pinned to one core (taskset -c 0) while `wrk` drives it from the other core with 64 keep-alive
connections, all POSTing the same /generate request with `return_logprob`: 1,024 output tokens (an RL rollout's
answer) and 16 (what a router load test sends), each length its own table. The servers are measured in
interleaved rounds in one run, so that load from elsewhere on a shared machine hits all of them alike, and the
tables report each server's best round and the ratios between them.

  - sglang-mock: this project's server (release build).
  - fastapi+orjson: `bench/fastapi_mock.py`, FastAPI on uvicorn with uvloop and httptools, orjson serialisation.
  - ceiling: `mock-server/examples/ceiling.rs`, the same axum stack answering with a pre-built body of the same
    size (a response captured from sglang-mock for the same request).
  - floor: what sglang-mock cannot go below, computed rather than served: the ceiling's time per answer (HTTP
    alone) plus generating the answer without encoding it and encoding the finished answer, each timed in the
    same rounds by `mock-server/examples/floor.rs` on the server's core through the server's own code. The
    table then shows how close the server is to its own floor.

Needs: wrk (apt-get install wrk), and fastapi, uvicorn[standard], orjson (pip install).

    python3 bench/loopback.py [--seconds 10] [--rounds 3] [--connections 64] [--tokens 1024,16] [--baseline PATH]
                              [--tokenizer PATH] [--ledger] [--model-path DIR]

`--baseline PATH` adds another sglang-mock binary (an earlier build, say) as a row of the same rounds, so that a
change to the server is measured side by side with what it replaces. `--tokenizer PATH` adds sglang-mock with
that Hugging Face tokenizer (`target/qwen-tokenizer`, built by `scripts/qwen_tokenizer.py`, is Qwen's) as a row
too, and reports its throughput as a ratio of the toy tokenizer's in the same rounds. `--ledger` adds sglang-mock
with its witness's ledger on (every answer recorded, the oldest evicted past the default bound) as a row too, and
reports its throughput as a ratio of the same build's without it. `--model-path DIR` adds sglang-mock serving the
toy policy of that directory (MODEL.md section 14; `--model-path random` writes one whose every bucket moves every
slot, the slowest case) as a row too, and reports its throughput as a ratio of the all-zero weights'.

Each of these variants is also co-run with sglang-mock in every round: both servers on core 0 at once, each
driven by its own wrk from core 1. The scheduler gives each half the core, so the ratio of their requests/s is the
inverse ratio of their CPU time per request, measured over the same seconds. On a shared machine two solo rounds
a few seconds apart can differ by 10% or more, while co-run ratios of one build against itself stay within 1%: the
co-run median is the figure to quote for a change of a few percent.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request

from servers import free_port, start_mock, wait_healthy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def request(tokens: int) -> dict:
    return {
        "input_ids": [785, 6722, 315, 9625, 374],
        "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True, "temperature": 1.0},
        "return_logprob": True,
    }


def policy_dir(path: str, tmp: str) -> str:
    """The toy policy directory to serve: `path`, or for `random` one written under `tmp` whose offsets are all
    non-zero, so that every context takes the path that sorts the moved weights."""
    if path != "random":
        return os.path.abspath(path)
    import random
    rng = random.Random(49)
    rows = [[rng.uniform(-2.0, 4.0) or 0.5 for _ in range(9)] for _ in range(8)]
    sys.path.insert(0, os.path.join(ROOT, "python", "src"))
    from sglang_mock.policy import Policy
    directory = os.path.join(tmp, "policy")
    Policy(rows).save(directory)
    return directory


def post_generate(url: str, tokens: int) -> bytes:
    req = urllib.request.Request(url + "/generate", data=json.dumps(request(tokens)).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def check_body(name: str, body: bytes, tokens: int) -> None:
    out = json.loads(body)
    lps = out["meta_info"]["output_token_logprobs"]
    assert len(out["output_ids"]) == len(lps) == tokens, f"{name}: wrong number of tokens"
    assert all(item[1] == tok for item, tok in zip(lps, out["output_ids"])), f"{name}: ids disagree"


def wrk_command(url: str, seconds: int, connections: int, lua: str) -> list[str]:
    return ["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s",
            "-s", lua, url + "/generate"]


def run_wrk(url: str, seconds: int, connections: int, lua: str) -> tuple[float, float]:
    out = subprocess.run(wrk_command(url, seconds, connections, lua), check=True, capture_output=True,
                         text=True).stdout
    return parse_wrk(url, out)


def parse_wrk(url: str, out: str) -> tuple[float, float]:
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    m = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", out)
    scale = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}[m.group(2)]
    # Any failed request makes the figure meaningless: non-2xx answers, or connect/read/write/timeout errors.
    if "Non-2xx or 3xx responses" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk reported errors against {url}:\n{out}")
    return rps, float(m.group(1)) * scale


def main() -> None:
    parser = argparse.ArgumentParser(description="loopback benchmark of sglang-mock")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--tokens", default="1024,16", help="answer lengths, one table each")
    parser.add_argument("--baseline", help="another sglang-mock binary to measure in the same rounds")
    parser.add_argument("--tokenizer", help="also measure sglang-mock with this --tokenizer in the same rounds")
    parser.add_argument("--ledger", action="store_true", help="also measure sglang-mock --ledger in the same rounds")
    parser.add_argument("--model-path", help="also measure sglang-mock serving this toy policy directory ('random': "
                                             "a policy that moves every slot of every bucket)")
    args = parser.parse_args()
    lengths = [int(t) for t in args.tokens.split(",")]
    for tool in ("wrk", "taskset"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is required (apt-get install wrk util-linux)")

    subprocess.run(["cargo", "build", "--release", "-p", "mock-server", "--bin", "sglang-mock",
                    "--example", "ceiling", "--example", "floor"], cwd=ROOT, check=True)
    target = os.path.join(ROOT, "target", "release")
    tmp = tempfile.mkdtemp()

    def start(name: str, cmd: list[str]) -> tuple[subprocess.Popen, str]:
        # sglang-mock says where it listens; the FastAPI mock and the ceiling take a free port.
        if name.startswith("sglang-mock"):
            return start_mock(["taskset", "-c", "0", *cmd])
        port = free_port()
        proc = subprocess.Popen(["taskset", "-c", "0", *cmd, "--port", str(port)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        return proc, url

    def corun(variant: list[str], tokens: int) -> float:
        """sglang-mock and `variant` served at once, both pinned to core 0 and each driven by its own wrk from
        core 1: the scheduler gives each half the core, so the ratio of their requests/s is the inverse ratio of
        their CPU time per request, whatever else the shared machine does meanwhile (which moves the two solo
        rounds of a pair apart by more than the few percent a change is measured in)."""
        procs = []
        try:
            urls = []
            for name, cmd in (("sglang-mock", mock), ("sglang-mock variant", variant)):
                proc, url = start(name, cmd)
                procs.append(proc)
                urls.append(url)
            for url in urls:
                run_wrk(url, 1, args.connections, lua[tokens])  # warm-up
            drivers = [subprocess.Popen(wrk_command(url, args.seconds, args.connections, lua[tokens]),
                                        stdout=subprocess.PIPE, text=True) for url in urls]
            outs = [d.communicate()[0] for d in drivers]
            if any(d.returncode != 0 for d in drivers):
                raise RuntimeError("wrk failed in a co-run")
            base, other = (parse_wrk(url, out)[0] for url, out in zip(urls, outs))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait()
        return other / base

    mock = [os.path.join(target, "sglang-mock")]
    # Per length: the wrk script, and the servers with a ceiling that serves a real sglang-mock response.
    lua: dict[int, str] = {}
    servers: dict[int, dict[str, list[str]]] = {}
    proc, url = start("sglang-mock", mock)
    for tokens in lengths:
        lua[tokens] = os.path.join(tmp, f"post-{tokens}.lua")
        with open(lua[tokens], "w") as f:
            body = json.dumps(request(tokens)).replace("\\", "\\\\").replace('"', '\\"')
            f.write(f'wrk.method = "POST"\nwrk.body = "{body}"\nwrk.headers["Content-Type"] = "application/json"\n')
        body_file = os.path.join(tmp, f"response-{tokens}.json")
        with open(body_file, "wb") as f:
            f.write(post_generate(url, tokens))
        servers[tokens] = {
            "sglang-mock": mock,
            "fastapi+orjson": [sys.executable, os.path.join(ROOT, "bench", "fastapi_mock.py")],
            "ceiling (pre-built body)": [os.path.join(target, "examples", "ceiling"), "--body", body_file],
        }
        if args.baseline:
            servers[tokens]["sglang-mock (baseline)"] = [os.path.abspath(args.baseline)]
        if args.tokenizer:
            servers[tokens]["sglang-mock --tokenizer"] = mock + ["--tokenizer", os.path.abspath(args.tokenizer)]
        if args.ledger:
            servers[tokens]["sglang-mock --ledger"] = mock + ["--ledger"]
        if args.model_path:
            servers[tokens]["sglang-mock --model-path"] = mock + ["--model-path", policy_dir(args.model_path, tmp)]
    proc.terminate()
    proc.wait()

    best: dict[tuple[int, str], tuple[float, float]] = {}
    sizes: dict[tuple[int, str], int] = {}
    floor: dict[int, dict[str, float]] = {}
    for rnd in range(args.rounds):
        for tokens in lengths:
            out = subprocess.run(["taskset", "-c", "0", os.path.join(target, "examples", "floor"), str(tokens), "5"],
                                 check=True, capture_output=True, text=True).stdout
            parts = json.loads(out)
            for key in ("generate_us", "encode_us"):
                floor.setdefault(tokens, {})[key] = min(floor.get(tokens, {}).get(key, float("inf")), parts[key])
            for name, cmd in servers[tokens].items():
                proc, url = start(name, cmd)
                try:
                    body = post_generate(url, tokens)
                    check_body(name, body, tokens)
                    sizes[tokens, name] = len(body)
                    run_wrk(url, 2, args.connections, lua[tokens])  # warm-up
                    rps, bps = run_wrk(url, args.seconds, args.connections, lua[tokens])
                finally:
                    proc.terminate()
                    proc.wait()
                print(f"round {rnd + 1}: {tokens} tokens: {name}: {rps:,.0f} req/s, {bps / 1e6:,.1f} MB/s",
                      file=sys.stderr)
                if (tokens, name) not in best or rps > best[tokens, name][0]:
                    best[tokens, name] = (rps, bps)

    # Every variant of sglang-mock beside sglang-mock itself, co-run in each round.
    variants = {tokens: {name: cmd for name, cmd in servers[tokens].items()
                         if name.startswith("sglang-mock ")} for tokens in lengths}
    coruns: dict[tuple[int, str], list[float]] = {}
    for rnd in range(args.rounds):
        for tokens in lengths:
            for name, cmd in variants[tokens].items():
                ratio = corun(cmd, tokens)
                coruns.setdefault((tokens, name), []).append(ratio)
                print(f"co-run {rnd + 1}: {tokens} tokens: {name}: {ratio:.3f} of sglang-mock's requests/s",
                      file=sys.stderr)

    def shared_core(tokens: int, name: str) -> str:
        ratios = sorted(coruns[tokens, name])
        return (f"{statistics.median(ratios):.3f} when both share one core (median of {len(ratios)} co-runs, "
                f"{ratios[0]:.3f} to {ratios[-1]:.3f})")

    for tokens in lengths:
        python = best[tokens, "fastapi+orjson"][0]
        ceiling = best[tokens, "ceiling (pre-built body)"][0]
        print(f"\n{tokens:,} output tokens with return_logprob; {args.connections} connections, server pinned to "
              f"one core, best of {args.rounds} rounds of {args.seconds} s\n")
        print("| server | requests/s | response MB/s | body bytes | vs FastAPI | vs ceiling |")
        print("|---|---:|---:|---:|---:|---:|")
        for name in servers[tokens]:
            rps, bps = best[tokens, name]
            print(f"| {name} | {rps:,.0f} | {bps / 1e6:,.1f} | {sizes[tokens, name]:,} | {rps / python:.1f}x | "
                  f"{rps / ceiling:.2f} |")
        gen, enc = floor[tokens]["generate_us"], floor[tokens]["encode_us"]
        http = 1e6 / ceiling
        floor_rps = 1e6 / (http + gen + enc)
        size = sizes[tokens, "sglang-mock"]
        print(f"| floor: HTTP {http:.1f} us + generating {gen:.1f} us + encoding {enc:.1f} us per answer | "
              f"{floor_rps:,.0f} | {floor_rps * size / 1e6:,.1f} | {size:,} | {floor_rps / python:.1f}x | "
              f"{floor_rps / ceiling:.2f} |")
        print(f"\nsglang-mock reaches {best[tokens, 'sglang-mock'][0] / floor_rps:.2f} of its floor.")
        if args.baseline:
            print(f"The baseline: {shared_core(tokens, 'sglang-mock (baseline)')} of this build's requests/s.")
        if args.tokenizer:
            ratio = best[tokens, "sglang-mock --tokenizer"][0] / best[tokens, "sglang-mock"][0]
            print(f"With --tokenizer {args.tokenizer}: {ratio:.2f} of the toy tokenizer's requests/s (best rounds); "
                  f"{shared_core(tokens, 'sglang-mock --tokenizer')}.")
        if args.ledger:
            ratio = best[tokens, "sglang-mock --ledger"][0] / best[tokens, "sglang-mock"][0]
            print(f"With --ledger: {ratio:.3f} of the requests/s without it (best rounds); "
                  f"{shared_core(tokens, 'sglang-mock --ledger')}.")
        if args.model_path:
            ratio = best[tokens, "sglang-mock --model-path"][0] / best[tokens, "sglang-mock"][0]
            print(f"With the weights of --model-path {args.model_path}: {ratio:.3f} of the requests/s of all-zero "
                  f"weights (best rounds); {shared_core(tokens, 'sglang-mock --model-path')}.")


if __name__ == "__main__":
    main()
