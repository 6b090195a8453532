#!/usr/bin/env python3
"""Send a server batches that its KV pool cannot hold at once, and record how it scheduled them: for each
sample its completion tokens and `num_retractions`, and from a real server's log its prefill steps and its
retractions. Against a real SGLang release started with a small `--max-total-tokens`, this records what the
mock's scheduler must do; `mock-server/tests/sched.rs` replays the recordings against the mock.

    python3 scripts/real_sglang.py start 0.5.23 --port 31023 --max-total-tokens 600
    python3 scripts/sched_probe.py http://127.0.0.1:31023 --pool 600 \\
        --log target/real-sglang/0.5.23/server.log --record mock-server/conform/sched/0.5.23-600.json \\
        --release 0.5.23 --command '...'

Each scenario is one `/generate` request whose `input_ids` is a batch, so that every sample reaches the
scheduler together and the schedule does not depend on when requests arrive: 0.5.15 and 0.5.23 send a
pre-tokenized batch to the scheduler as one message (`_should_use_batch_tokenization`), while 0.5.3 sends its
samples one by one and needs `SGLANG_ENABLE_COLOCATED_BATCH_GEN=1`, with which its scheduler holds what arrives
until the whole batch is there (`input_blocker_guard_region`, `scheduler_input_blocker.py`). The prompts are fixed token ids,
different in every scenario and sample so that no prompt is a prefix-cache hit of another. Every sample asks
for `min_new_tokens` equal to its `max_new_tokens`, greedily: neither the real server's random-weight model nor
the mock's toy model (whose end-of-turn token leads late in a turn) can stop it early, so every sample runs to
its length and the pool, not the model, decides the schedule (the script checks it), while samples without
`ignore_eos` still reserve only the new-token ratio of their remaining tokens, as SGLang's admission ignores
`min_new_tokens`.

The log gives what SGLang's scheduler printed for the scenario: each `Prefill batch` line's `#new-seq` and each
`KV cache pool is full. Retract requests.` line's retracted count and new-token ratios.

Standard library only.
"""

import argparse
import json
import re
import urllib.request

# (name, [(prompt tokens, max_new_tokens, ignore_eos, count)], pool)
SCENARIOS = {
    600: [
        ("eight-may-stop", [(20, 200, False, 8)]),
        ("eight-ignore-eos", [(20, 200, True, 8)]),
        ("mixed", [(20, 50, False, 1), (40, 200, False, 3), (10, 150, False, 2), (30, 120, True, 2)]),
    ],
    2000: [
        ("eight-long", [(20, 500, False, 8)]),
    ],
}


def prompts(scenario: int, shape):
    out = []
    for prompt, max_new, ignore_eos, count in shape:
        for _ in range(count):
            i = len(out)
            ids = [100 + (7919 * scenario + 104729 * i + 31 * j) % 30000 for j in range(prompt)]
            out.append((ids, max_new, ignore_eos))
    return out


def generate(url: str, samples):
    body = {
        "input_ids": [ids for ids, _, _ in samples],
        "sampling_params": [
            {"max_new_tokens": m, "min_new_tokens": m, "ignore_eos": e, "temperature": 0.0}
            for _, m, e in samples
        ],
    }
    req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as resp:
        return body, json.load(resp)


PREFILL = re.compile(r"Prefill batch[.,] #new-seq: (\d+)")
RETRACT = re.compile(r"#retracted_reqs: (\d+).*#new_token_ratio: ([0-9.]+) -> ([0-9.]+)")


def log_events(text: str):
    events = []
    for line in text.splitlines():
        if m := PREFILL.search(line):
            events.append({"prefill": int(m.group(1))})
        elif m := RETRACT.search(line):
            events.append({"retract": int(m.group(1)), "ratio": [float(m.group(2)), float(m.group(3))]})
    return events


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--pool", type=int, required=True, choices=sorted(SCENARIOS))
    ap.add_argument("--log", help="the server's log, to read its scheduler's lines from")
    ap.add_argument("--record")
    ap.add_argument("--release")
    ap.add_argument("--command")
    args = ap.parse_args()
    scenarios = []
    for n, (name, shape) in enumerate(SCENARIOS[args.pool]):
        samples = prompts(args.pool + n, shape)
        start = len(open(args.log).read()) if args.log else 0
        body, answer = generate(args.url, samples)
        items = [{
            "completion_tokens": a["meta_info"]["completion_tokens"],
            "num_retractions": a["meta_info"].get("num_retractions"),  # None: the release has no such key
        } for a in answer]
        for (ids, max_new, _), item in zip(samples, items):
            assert item["completion_tokens"] == max_new, f"{name}: a sample stopped early: {item}"
        scenario = {"name": name, "request": body, "items": items}
        if args.log:
            scenario["log"] = log_events(open(args.log).read()[start:])
        print(name, [i["num_retractions"] for i in items], scenario.get("log", ""))
        scenarios.append(scenario)
    if args.record:
        with open(args.record, "w") as f:
            json.dump({"release": args.release, "command": args.command, "max_total_tokens": args.pool,
                       "scenarios": scenarios}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
