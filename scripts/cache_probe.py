#!/usr/bin/env python3
"""Ask a running server what its radix prefix cache reports: a fixed list of request sequences, each after
`/flush_cache`, and the `cached_tokens` of every answer. Against a real SGLang release it records the rules the
mock's prefix cache must follow; against the mock it shows whether it does.

    python3 scripts/cache_probe.py URL [--record FILE --release X.Y.Z --command '...' [--page-size N]]

Without `--record` it prints each scenario's observed counts. With it, it writes FILE
(`mock-server/conform/cache/<release>.json`): the release, the command that served it, its page size, and every
scenario's steps with what was observed, which `mock-server/tests/prefix_cache.rs` replays against the mock.

A step is one request to `/generate` (`input_ids`, greedy unless it says otherwise), or `flush`. An `extend`
step's prompt is an earlier step's prompt and the tokens that step generated (the last `completion_tokens` of
its `output_ids`: 0.5.3 writes the prompt's last five ids before them), then `append`. Before each flush the
script waits until the server has let the last request go: a flush while a request is still in the batch is
refused, and its 200 says so only in prose.

Standard library only.
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def ids(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


P = ids(1000, 64)
# Each scenario: a name, what it shows, and its steps. A step without `op` is a /generate body's parts.
SCENARIOS = [
    {"name": "repeat", "shows": "the same prompt again hits all but its last token",
     "steps": [{"input_ids": P}, {"input_ids": P}]},
    {"name": "shared_prefix", "shows": "a prompt sharing its first 40 tokens hits 40",
     "steps": [{"input_ids": P}, {"input_ids": P[:40] + ids(2000, 24)}]},
    {"name": "multi_turn", "shows": "a finished request leaves its prompt and output (all but the last "
     "output token in 0.5.23) for the next turn",
     "steps": [{"input_ids": P}, {"extend": 0, "append": [5000, 5001]}]},
    {"name": "multi_turn_exact", "shows": "the next turn is the previous prompt and output exactly",
     "steps": [{"input_ids": P}, {"extend": 0, "append": []}]},
    {"name": "longer_output", "shows": "what a finished request of 40 tokens leaves",
     "steps": [{"input_ids": P, "max_new_tokens": 40}, {"extend": 0, "append": [5000]}]},
    {"name": "logprob_start_len", "shows": "a hit stops at logprob_start_len when logprobs are asked for",
     "steps": [{"input_ids": P}, {"input_ids": P, "return_logprob": True, "logprob_start_len": 10}]},
    {"name": "logprob_default", "shows": "logprobs without a start position do not shorten a hit",
     "steps": [{"input_ids": P}, {"input_ids": P, "return_logprob": True}]},
    {"name": "batch", "shows": "two equal prompts of one batch are prefilled together: neither hits",
     "steps": [{"input_ids": [ids(3000, 30), ids(3000, 30)]}]},
    {"name": "parallel_sampling", "shows": "n > 1 first caches the prompt with a request of no new tokens",
     "steps": [{"input_ids": ids(4000, 30), "n": 2, "temperature": 1.0}]},
    {"name": "no_new_tokens", "shows": "max_new_tokens 0 leaves its whole prompt",
     "steps": [{"input_ids": ids(5000, 30), "max_new_tokens": 0}, {"input_ids": ids(5000, 30)}]},
    {"name": "flush", "shows": "/flush_cache empties the tree",
     "steps": [{"input_ids": P}, {"op": "flush"}, {"input_ids": P}]},
    {"name": "short", "shows": "a one-token prompt can never hit",
     "steps": [{"input_ids": [7]}, {"input_ids": [7]}, {"input_ids": [7, 8]}]},
    {"name": "branch", "shows": "two prompts diverging at token 20, then a third matching the second",
     "steps": [{"input_ids": P[:20] + ids(6000, 20)}, {"input_ids": P[:20] + ids(7000, 20)},
               {"input_ids": P[:20] + ids(7000, 10) + ids(8000, 10)}, {"input_ids": P[:25]}]},
]


def post(url: str, path: str, body: dict) -> tuple[int, object]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def generated(item: dict) -> list[int]:
    """The tokens a step generated: the last `completion_tokens` of its `output_ids`."""
    n = item["meta_info"]["completion_tokens"]
    return item["output_ids"][len(item["output_ids"]) - n:] if n else []


def body_of(step: dict, prompts: list, answers: list) -> dict:
    if "extend" in step:
        k = step["extend"]
        input_ids = prompts[k] + generated(answers[k]) + step["append"]
    else:
        input_ids = step["input_ids"]
    sampling = {"max_new_tokens": step.get("max_new_tokens", 4), "temperature": step.get("temperature", 0.0)}
    if "n" in step:
        sampling["n"] = step["n"]
    body = {"input_ids": input_ids, "sampling_params": sampling}
    for key in ("return_logprob", "logprob_start_len"):
        if key in step:
            body[key] = step[key]
    return body


def settle() -> None:
    """Lets the scheduler drop the last finished request from its batch, so that a flush is not refused."""
    time.sleep(0.5)


def flush(url: str) -> None:
    settle()
    status, _ = post(url, "/flush_cache", {})
    if status != 200:
        sys.exit(f"cache_probe: /flush_cache answered {status}")


def run(url: str, scenario: dict) -> list:
    """Each step's observation: `cached_tokens` (a list for a batch or n > 1), or "flushed"."""
    flush(url)
    prompts, answers, observed = [], [], []
    for step in scenario["steps"]:
        if step.get("op") == "flush":
            flush(url)
            prompts.append(None)
            answers.append(None)
            observed.append("flushed")
            continue
        body = body_of(step, prompts, answers)
        status, answer = post(url, "/generate", body)
        if status != 200:
            sys.exit(f"cache_probe: {scenario['name']}: /generate answered {status}: {answer}")
        prompts.append(body["input_ids"])
        answers.append(answer)
        if isinstance(answer, list):
            observed.append([a["meta_info"]["cached_tokens"] for a in answer])
        else:
            observed.append(answer["meta_info"]["cached_tokens"])
        settle()
    return observed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--record", help="write the scenarios and observations to this file")
    parser.add_argument("--release", help="the release that served them (with --record)")
    parser.add_argument("--command", help="the command that started the server (with --record)")
    parser.add_argument("--page-size", type=int, default=1, help="the server's --page-size (with --record)")
    args = parser.parse_args()
    results = []
    for scenario in SCENARIOS:
        observed = run(args.url, scenario)
        print(f"{scenario['name']:>20}: {observed}", flush=True)
        results.append({**scenario, "observed": observed})
    if args.record:
        if not args.release or not args.command:
            sys.exit("cache_probe: --record needs --release and --command")
        with open(args.record, "w") as f:
            json.dump({"release": args.release, "command": args.command, "page_size": args.page_size,
                       "recorded_with": "scripts/cache_probe.py", "scenarios": results}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
