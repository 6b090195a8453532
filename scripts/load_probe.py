#!/usr/bin/env python3
"""Ask a running server what its load reports (`/v1/loads`, `/get_load`) say in two states: idle after a
request, and one request running while another waits for the one running slot (`--max-running-requests 1`).
Against a real SGLang release it records what
the mock's load reports must say; against the mock it shows whether they do.

    python3 scripts/load_probe.py URL [--record FILE --release X.Y.Z --command '...']

The server must run with `--max-running-requests 1`. The running request is a stream of 64 prompt tokens and
400 new ones whose first chunk has been read; the waiting one has 20 prompt tokens. A real server goes on
generating while the script looks (a few milliseconds a token on the CPU), so the script reads the load as soon
as the waiting request is in the queue, and what it records is what the timing cannot change: the counts of
requests, the waiting tokens, `num_total_tokens - num_used_tokens` (the waiting requests' tokens), the queues,
and the running request's used tokens at least its prompt. With `--record` it writes FILE
(`mock-server/conform/loads/<release>.json`), which `mock-server/tests/loads.rs` replays against the mock.

A paused server is not probed: SGLang's scheduler publishes no load snapshot while paused, so `/v1/loads`
then repeats the last one from before the pause.

Standard library only.
"""

import argparse
import http.client
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

RUNNING_PROMPT = list(range(1000, 1064))
WAITING_PROMPT = list(range(3000, 3020))


def request(url: str, method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def loads(url: str) -> dict:
    status, body = request(url, "GET", "/v1/loads")
    if status == 404:
        return {}
    return json.loads(body)["loads"][0]


def get_load(url: str):
    status, body = request(url, "GET", "/get_load")
    return json.loads(body)[0] if status == 200 else None


def observe(url: str) -> dict:
    """What the timing cannot change of the two reports."""
    out = {}
    load = loads(url)
    if load:
        out["v1_loads"] = {
            "num_running_reqs": load["num_running_reqs"],
            "num_waiting_reqs": load["num_waiting_reqs"],
            "num_waiting_uncached_tokens": load["num_waiting_uncached_tokens"],
            "pending_tokens": load["num_total_tokens"] - load["num_used_tokens"],
            "used_at_least_a_prompt": load["num_used_tokens"] >= len(RUNNING_PROMPT),
            "queues": load.get("queues"),
        }
        if "total_prefill_uncached_tokens" in load:
            out["v1_loads"]["total_prefill_uncached_tokens"] = load["total_prefill_uncached_tokens"]
    legacy = get_load(url)
    if legacy is not None:
        out["get_load"] = {
            "num_reqs": legacy["num_reqs"],
            "num_waiting_reqs": legacy["num_waiting_reqs"],
            # 0.5.3 reports the used and waiting tokens as one number.
            "tokens_at_least_both_prompts": legacy["num_tokens"] >= len(RUNNING_PROMPT) + (
                len(WAITING_PROMPT) if legacy["num_waiting_reqs"] else 0),
        }
        if "num_pending_tokens" in legacy:
            out["get_load"]["num_pending_tokens"] = legacy["num_pending_tokens"]
    return out


def idle_observation(url: str) -> dict:
    """The load of an idle server: everything 0 but the prefill total."""
    load = loads(url)
    out = {}
    if load:
        out["v1_loads"] = {k: load[k] for k in (
            "num_running_reqs", "num_waiting_reqs", "num_waiting_uncached_tokens", "num_used_tokens",
            "num_total_tokens", "token_usage") if k in load}
        out["v1_loads"]["queues"] = load.get("queues")
        if "total_prefill_uncached_tokens" in load:
            out["v1_loads"]["total_prefill_uncached_tokens"] = load["total_prefill_uncached_tokens"]
    legacy = get_load(url)
    if legacy is not None:
        out["get_load"] = {k: legacy[k] for k in ("num_reqs", "num_waiting_reqs", "num_tokens")}
    return out


class HeldStream:
    """A streamed /generate whose first chunk has been read, and nothing after it."""

    def __init__(self, url: str, prompt: list, new_tokens: int):
        parsed = urllib.parse.urlparse(url)
        self.conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
        body = {"input_ids": prompt, "stream": True,
                "sampling_params": {"max_new_tokens": new_tokens, "ignore_eos": True, "temperature": 0}}
        self.conn.request("POST", "/generate", json.dumps(body), {"content-type": "application/json"})
        self.response = self.conn.getresponse()
        line = b""
        while not line.startswith(b"data:"):
            line = self.response.readline()

    def close(self):
        self.conn.close()


def generate(url: str, prompt: list, new_tokens: int) -> dict:
    _, body = request(url, "POST", "/generate", {
        "input_ids": prompt, "sampling_params": {"max_new_tokens": new_tokens, "ignore_eos": True,
                                                 "temperature": 0}})
    return json.loads(body)


def wait_for(url: str, ok, what: str) -> None:
    for _ in range(400):
        if ok(loads(url) or {}, get_load(url)):
            return
        time.sleep(0.005)
    raise SystemExit(f"load_probe: the server never showed {what}")


def waiting_seen(load: dict, legacy) -> bool:
    if load:
        return load["num_waiting_reqs"] == 1
    return legacy is not None and legacy["num_waiting_reqs"] == 1


def settle(url: str) -> None:
    wait_for(url, lambda load, legacy: (load.get("num_running_reqs", 0) == 0 if load
                                         else legacy["num_reqs"] == 0), "an idle server")


def run(url: str) -> list:
    steps = []
    # An empty prefix cache, so that the prefill counts do not depend on what the server served before.
    settle(url)
    time.sleep(0.5)
    request(url, "POST", "/flush_cache", {})
    # Idle after one request of 64 prompt tokens and 4 new ones.
    generate(url, RUNNING_PROMPT, 4)
    settle(url)
    steps.append({"state": "idle", "observed": idle_observation(url)})
    # One request running, one waiting for the slot.
    held = HeldStream(url, RUNNING_PROMPT[::-1], 400)
    waiter = threading.Thread(target=generate, args=(url, WAITING_PROMPT, 2))
    waiter.start()
    wait_for(url, waiting_seen, "a waiting request")
    queued = observe(url)
    # A counter since start-up: what the running request added since the idle state.
    totals = [step["observed"].get("v1_loads", {}).pop("total_prefill_uncached_tokens", None)
              for step in (steps[0], {"observed": queued})]
    if None not in totals:
        queued["v1_loads"]["prefill_uncached_since_idle"] = totals[1] - totals[0]
    steps.append({"state": "queued", "observed": queued})
    held.close()
    waiter.join()
    settle(url)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--record", help="write the states and observations to this file")
    parser.add_argument("--release", help="the release that served them (with --record)")
    parser.add_argument("--command", help="the command that started the server (with --record)")
    args = parser.parse_args()
    steps = run(args.url.rstrip("/"))
    if not args.record:
        print(json.dumps(steps, indent=1))
        return
    with open(args.record, "w", encoding="utf-8") as out:
        json.dump({"release": args.release, "command": args.command, "recorded_with": "scripts/load_probe.py",
                   "running_prompt": len(RUNNING_PROMPT), "waiting_prompt": len(WAITING_PROMPT),
                   "states": steps}, out, indent=1)
        out.write("\n")


if __name__ == "__main__":
    main()
