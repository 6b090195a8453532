#!/usr/bin/env python3
"""Checks that two builds of `sglang-mock` answer alike, byte for byte, before a performance change lands.

A speed-up may not change a byte of any response or a bit of any logprob. The golden and oracle tests check the
server against fixtures and against its own engine; this script checks it against the build it replaces, over a
matrix of requests that reaches every path of the sampler and of the encoders: temperatures (greedy, 0.7, 1,
1.3), top-k / top-p / min-p, masks from `min_new_tokens`, stop strings and stop ids, top and token-id logprobs,
input logprobs, text in logprobs, `n > 1`, batches, streams (cumulative and incremental), the OpenAI
endpoints (echo, `n > 1`, batches, usage options), and engine, body and stream faults on both, under every
release the candidate answers as (`sglang-mock releases`) and with incremental streaming output. Both servers run
with the same seed; the fields that differ between any two runs (fresh request ids, `e2e_latency`,
`response_sent_to_client_ts`, OpenAI `id` and `created`) are blanked, everything else compared as bytes.

    python3 bench/compare_builds.py --baseline PATH [--candidate PATH] [--candidate-arg=--ledger ...]
                                    [--arg=--model-path=DIR ...]

`--candidate` defaults to this checkout's release build (built first). `--candidate-arg` adds a flag to the
candidate only: a feature that must not change an answer (the witness's `--ledger`) is checked so. `--arg` adds
a flag to both: `--arg=--model-path=DIR` compares the two builds' answers under the toy policy of DIR.
"""

import argparse
import http.client
import itertools
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

from servers import start_mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Values that differ between two runs of the same build, blanked before comparing.
VOLATILE = re.compile(
    rb'"(e2e_latency|response_sent_to_client_ts|created)":[0-9.e+-]+'
    rb'|"id":"[0-9a-f]{32}"|"id":"(chatcmpl|cmpl)-[0-9a-f]+"'
)


def blank(body: bytes) -> bytes:
    return VOLATILE.sub(lambda m: m.group(0).split(b":")[0] + b":0", body)


def native_requests():
    """The /generate matrix."""
    prompts = [
        {"input_ids": [785, 6722, 315, 9625, 374]},
        {"text": "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"},
        {"text": "The capital of France is"},
    ]
    samplers = [
        {"temperature": 1.0},
        {"temperature": 0.0},
        {"temperature": 0.7},
        {"temperature": 1.3},
        {"temperature": 1.0, "top_k": 5},
        {"temperature": 1.0, "top_p": 0.9},
        {"temperature": 0.8, "min_p": 0.1},
        {"temperature": 1.0, "min_new_tokens": 40},
        {"temperature": 1.0, "stop": [" ka", "ri"]},
        {"temperature": 1.0, "stop_token_ids": [46]},
        {"temperature": 1.0, "ignore_eos": True, "max_new_tokens": 700},
    ]
    logprobs = [
        {},
        {"return_logprob": True},
        {"return_logprob": True, "top_logprobs_num": 3, "token_ids_logprob": [13, 151645],
         "logprob_start_len": 0, "return_text_in_logprobs": True},
    ]
    for prompt, sampler, lp in itertools.product(prompts, samplers, logprobs):
        params = {"max_new_tokens": 300, **sampler}
        for stream in (False, True):
            yield "/generate", {**prompt, "sampling_params": params, **lp, "stream": stream}
    for seed in range(40):
        yield "/generate", {"input_ids": [seed, seed + 7], "return_logprob": True,
                            "sampling_params": {"max_new_tokens": 200, "sampling_seed": seed}}
    yield "/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 64, "n": 2},
                        "return_logprob": True}
    yield "/generate", {"text": ["Hello", "Goodbye"], "sampling_params": {"max_new_tokens": 64},
                        "return_logprob": True, "stream": True}
    yield "/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 64},
                        "return_logprob": True, "stream": True, "stream_options": {"incremental": True}}
    yield "/generate", {"input_ids": [1, 2, 3], "sampling_params": {"temperature": -1}}


def openai_requests():
    """The OpenAI matrix: both APIs, streamed and not, with logprobs, echo, `n > 1`, batches, stop strings and
    usage options."""
    messages = [{"role": "user", "content": "Say something."}]
    chat = [
        {"logprobs": True, "top_logprobs": 2},
        {"logprobs": True},
        {"stop": [" ka"], "n": 2},
        {"stream_options": {"include_usage": True, "continuous_usage_stats": True}, "logprobs": True},
    ]
    completions = [
        {"logprobs": 2},
        {"logprobs": 0, "echo": True},
        {"logprobs": 1, "echo": True, "n": 2},
        {"prompt": ["Once upon", "a time"], "logprobs": 1},
        {"stream_options": {"include_usage": True}},
    ]
    for extra, stream in itertools.product(chat, (False, True)):
        body = {"model": "mock", "messages": messages, "max_tokens": 40, **extra}
        if stream or "stream_options" not in extra:
            yield "/v1/chat/completions", {**body, "stream": stream}
    for extra, stream in itertools.product(completions, (False, True)):
        body = {"model": "mock", "prompt": "Once upon", "max_tokens": 40, **extra}
        if stream or "stream_options" not in extra:
            yield "/v1/completions", {**body, "stream": stream}


# Faults that act in the engine, on the body or on the stream, sent with `X-Mock-Fault`.
FAULTS = ["abort-waiting", "abort-before-prefill", "abort-running;after=3", "missing-logprobs",
          "null-logprob;at=1", "short-logprobs", "error-event;after=2", "truncate-stream;after=2",
          "duplicate-chunk;at=1"]


def fault_requests():
    """Every fault of `FAULTS` on a native and an OpenAI request of each kind."""
    native = [{"text": "Hello", "sampling_params": {"max_new_tokens": 24}, "return_logprob": True,
               "top_logprobs_num": 2},
              {"text": ["Hello", "Bye"], "sampling_params": {"max_new_tokens": 24}, "return_logprob": True}]
    openai = [("/v1/chat/completions", {"model": "mock", "messages": [{"role": "user", "content": "hi"}],
                                        "max_tokens": 24, "logprobs": True, "top_logprobs": 2}),
              ("/v1/completions", {"model": "mock", "prompt": "Once", "max_tokens": 24, "logprobs": 1,
                                   "echo": True, "n": 2})]
    stream_only = ("error-event", "truncate-stream", "duplicate-chunk")
    for fault, stream in itertools.product(FAULTS, (False, True)):
        if not stream and fault.startswith(stream_only):
            continue
        for body in native:
            yield "/generate", {**body, "stream": stream}, fault
        for path, body in openai:
            yield path, {**body, "stream": stream}, fault


def configs(candidate: str) -> list[tuple[list[str], bool]]:
    """The server configurations compared: the default release with the whole matrix, every other release the
    candidate answers as (`sglang-mock releases`) and incremental streaming, which change how answers are
    written, with the OpenAI and fault matrices."""
    listed = subprocess.run([candidate, "releases"], capture_output=True, text=True, check=True).stdout.split()
    others = [(["--sglang-version", release], False) for release in listed[:-1]]
    return [([], True), *others, (["--incremental-streaming-output"], False)]


def requests(full: bool):
    plain = itertools.chain(native_requests() if full else (), openai_requests())
    yield from ((path, body, None) for path, body in plain)
    yield from fault_requests()


def post(url: str, path: str, body: dict, fault: str | None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if fault:
        headers["X-Mock-Fault"] = fault
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except http.client.IncompleteRead as e:
        # A fault that cuts the body: compare what arrived.
        return -1, e.partial


def start(binary: str, flags: list[str]) -> tuple[subprocess.Popen, str]:
    return start_mock([binary, *flags])


def main() -> None:
    parser = argparse.ArgumentParser(description="compare two sglang-mock builds' answers byte for byte")
    parser.add_argument("--baseline", required=True, help="the sglang-mock binary to compare against")
    parser.add_argument("--candidate", help="the sglang-mock binary under test (default: this checkout's)")
    parser.add_argument("--candidate-arg", action="append", default=[],
                        help="a flag for the candidate alone (repeatable), e.g. --candidate-arg=--ledger")
    parser.add_argument("--arg", action="append", default=[],
                        help="a flag for both builds (repeatable), e.g. --arg=--model-path=DIR to compare the "
                             "answers of a toy policy's weights")
    args = parser.parse_args()
    candidate = args.candidate
    if candidate is None:
        subprocess.run(["cargo", "build", "--release", "-p", "mock-server", "--bin", "sglang-mock"], cwd=ROOT,
                       check=True)
        candidate = os.path.join(ROOT, "target", "release", "sglang-mock")

    compared, differing, total_bytes = 0, [], 0
    skipped = []
    for flags, full in configs(os.path.abspath(candidate)):
        try:
            base_proc, base_url = start(os.path.abspath(args.baseline), [*flags, *args.arg])
        except RuntimeError:
            # A baseline from before a release refuses its number: nothing to compare that release with.
            if not flags:
                raise
            skipped.append(" ".join(flags))
            continue
        cand_proc, cand_url = start(os.path.abspath(candidate), [*flags, *args.arg, *args.candidate_arg])
        try:
            for path, body, fault in requests(full):
                a_status, a = post(base_url, path, body, fault)
                b_status, b = post(cand_url, path, body, fault)
                compared += 1
                total_bytes += len(b)
                if (a_status, blank(a)) != (b_status, blank(b)):
                    differing.append((flags, path, body, fault, a_status, b_status))
        finally:
            for proc in (base_proc, cand_proc):
                proc.terminate()
                proc.wait()
    print(f"{compared} requests, {total_bytes:,} bytes from the candidate: {len(differing)} differ")
    for flags in skipped:
        print(f"  not compared: {flags} (the baseline does not start with it)")
    for flags, path, body, fault, a_status, b_status in differing[:10]:
        print(f"  {' '.join(flags)} {path} {json.dumps(body)} fault={fault}: status {a_status} vs {b_status}",
              file=sys.stderr)
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
