#!/usr/bin/env python3
"""Generated request bodies sent to a running SGLang release and to the mock, compared on what neither the weights
nor the clock decide.

    python3 scripts/real_sglang.py start 0.5.23
    sglang-mock --sglang-version 0.5.23 --tokenizer target/qwen-tokenizer \\
        --model-path target/real-sglang/models/qwen3-tiny --max-total-tokens 65536 --port 0
    python3 scripts/differential.py --release URL --mock URL [--count 1500] [--seed 1976] [--restart 0.5.23]

Each body starts from a valid request of one route (`/generate`, the OpenAI routes, `/tokenize` and
`/detokenize`, the control routes, the info routes, each with and without a trailing slash) and changes one thing:
a field set to a value of another type or out of range, a field removed, an unknown field, a body that is not an
object, not JSON or not sent as JSON. Both servers get the same bodies in the same order, so their prefix caches
and queues see the same history; a pause is always followed by a continue.

What is compared: the status; for an error, the whole body (the install directory in a Python frame left out);
for an answer, its skeleton (every key in its order and every value's JSON type, a list by its first item), as
the text, the ids, the logprobs, the lengths and the timings are the weights' and the clock's; for a stream, the
skeleton of its first and last events and whether it ends with `[DONE]`. A body that the release fails to answer
(its process died, or the connection broke) is the release's outage, not a difference; with `--restart` the
release is started again (`scripts/real_sglang.py start`) and the run goes on.

Prints a line per class of difference (the route, the two statuses, what differs) with its count and one body,
then `differential: N bodies, O release outages, A of R agree (P%)`, R being the bodies the release answered.
Standard library only.
"""

import argparse
import http.client
import json
import random
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

MODEL = "default"
NO_BODY = object()  # a request without a body
VALUES = [None, True, False, 0, 1, -1, 2.5, -0.5, "x", "", [], [1], ["a"], {}, {"a": 1}, 2**64, -(2**63) - 1,
          1e308, "1", [1, "a"], [[1, 2]], 100000]

GENERATE = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
GENERATE_FIELDS = ["text", "input_ids", "sampling_params", "return_logprob", "logprob_start_len",
                   "top_logprobs_num", "token_ids_logprob", "return_text_in_logprobs", "stream", "rid",
                   "return_hidden_states", "lora_path", "custom_logit_processor", "bootstrap_host", "session_params",
                   "return_prompt_token_ids", "image_data", "log_metrics", "priority", "routing_key"]
SAMPLING_FIELDS = ["max_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids",
                   "ignore_eos", "skip_special_tokens", "n", "frequency_penalty", "presence_penalty",
                   "repetition_penalty", "min_new_tokens", "no_stop_trim", "json_schema", "regex", "ebnf",
                   "stop_regex", "logit_bias", "sampling_seed", "spaces_between_special_tokens", "stream_interval"]
COMPLETIONS = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
COMPLETIONS_FIELDS = ["model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
                      "logprobs", "echo", "stop", "seed", "frequency_penalty", "presence_penalty", "suffix",
                      "best_of", "user", "min_tokens", "top_k", "ignore_eos", "logit_bias", "stop_token_ids",
                      "skip_special_tokens", "return_hidden_states", "rid", "regex", "stop_regex"]
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
CHAT_FIELDS = ["model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
               "stream_options", "logprobs", "top_logprobs", "stop", "tools", "tool_choice", "response_format",
               "seed", "user", "continue_final_message", "separate_reasoning", "chat_template_kwargs",
               "min_tokens", "top_k", "ignore_eos", "return_hidden_states", "rid", "parallel_tool_calls"]
# (method, path, valid body or None for no body, the fields a mutation may touch)
ROUTES = [
    ("POST", "/generate", GENERATE, GENERATE_FIELDS),
    ("POST", "/v1/completions", COMPLETIONS, COMPLETIONS_FIELDS),
    ("POST", "/v1/chat/completions", CHAT, CHAT_FIELDS),
    ("POST", "/tokenize", {"prompt": "Hello world"}, ["prompt", "add_special_tokens", "model"]),
    ("POST", "/detokenize", {"tokens": [9707, 1879]}, ["tokens", "skip_special_tokens", "model"]),
    ("POST", "/v1/tokenize", {"model": MODEL, "prompt": "Hello world"}, ["prompt", "add_special_tokens", "model"]),
    ("POST", "/v1/detokenize", {"model": MODEL, "tokens": [9707, 1879]}, ["tokens", "model"]),
    ("POST", "/abort_request", {"rid": "no-such-request"}, ["rid", "abort_all", "abort_message"]),
    ("POST", "/flush_cache", NO_BODY, []),
    ("POST", "/pause_generation", {}, ["mode"]),
    ("POST", "/continue_generation", {}, ["mode"]),
    ("GET", "/health", NO_BODY, []),
    ("GET", "/health_generate", NO_BODY, []),
    ("GET", "/model_info", NO_BODY, []),
    ("GET", "/get_model_info", NO_BODY, []),
    ("GET", "/v1/models", NO_BODY, []),
    ("GET", "/v1/loads", NO_BODY, []),
    ("GET", "/get_load", NO_BODY, []),
]
FRAME = re.compile(r'File \\?"[^"\\]*/(sglang/srt/[^"\\]*)\\?"')


def mutate(rng, body, fields):
    """One change to a valid body, and its label."""
    if body is NO_BODY:
        return body, "valid"
    body = json.loads(json.dumps(body))
    roll = rng.random()
    if roll < 0.04:
        return rng.choice([[], "x", 5, None, {}]), "not an object"
    if roll < 0.08:
        return "not json", "not JSON"
    if roll < 0.12:
        return ("text/plain", body), "text/plain"
    if roll < 0.2:
        body[f"unknown_{rng.randrange(3)}"] = rng.choice(VALUES)
        return body, "unknown field"
    sampling = "sampling_params" in body and rng.random() < 0.5
    target = body["sampling_params"] if sampling else body
    names = SAMPLING_FIELDS if sampling else fields
    if not names:
        return body, "valid"
    name = rng.choice(names)
    if roll < 0.3 and name in target:
        del target[name]
        return body, f"{name} removed"
    if roll < 0.36:
        return body, "valid"
    target[name] = rng.choice(VALUES)
    return body, f"{'sampling_params.' if sampling else ''}{name}"


def send(url, method, path, body, timeout):
    """(status, content type, bytes), or None when the server did not answer."""
    headers = {}
    data = None
    if isinstance(body, tuple):
        headers["Content-Type"], body = body[0], body[1]
        data = json.dumps(body).encode()
    elif body == "not json":
        headers["Content-Type"] = "application/json"
        data = b'{"text": "unfinished'
    elif body is not NO_BODY:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            try:
                raw = response.read()
            except http.client.IncompleteRead as err:
                # A stream the server broke off: what it sent, and the break.
                raw = err.partial + b"\n<broken>"
            return response.status, response.headers.get("content-type", ""), raw
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("content-type", ""), err.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


# Values the clock decides, whatever their type: `/v1/loads`' decode-step statistics are `None` until a decode step
# took measurable time (`_accumulate_decode_moment` skips the others), which the mock's steps do not.
CLOCK_KEYS = {"decode_moments"}


def skeleton(value):
    """Keys in order and JSON types; a list by its first item."""
    if isinstance(value, dict):
        return {k: "clock" if k in CLOCK_KEYS else skeleton(v) for k, v in value.items()}
    if isinstance(value, list):
        return [skeleton(value[0])] if value else []
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


def view(answer):
    """What is compared of one answer."""
    status, content_type, raw = answer
    text = raw.decode("utf-8", "replace")
    if "text/event-stream" in content_type:
        events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
        done = bool(events) and events[-1] == "[DONE]"
        if text.endswith("<broken>"):
            done = "broken"
        data = [e for e in events if e != "[DONE]"]
        parsed = []
        for event in data[:1] + data[-1:]:
            try:
                value = json.loads(event)
            except ValueError:
                parsed.append(event)
                continue
            parsed.append(value if "error" in value else skeleton(value))
        return {"status": status, "stream": parsed, "done": done}
    try:
        value = json.loads(text)
    except ValueError:
        return {"status": status, "body": FRAME.sub(r"\1", text)[:300]}
    if status >= 400:
        return {"status": status, "body": json.loads(FRAME.sub(r"\1", json.dumps(value)))}
    return {"status": status, "body": skeleton(value)}


def difference(release, mock):
    if release["status"] != mock["status"]:
        return "status"
    if "stream" in release or "stream" in mock:
        return "stream"
    return "error body" if release["status"] >= 400 else "answer skeleton"


def restart(version):
    subprocess.run([sys.executable, str(Path(__file__).with_name("real_sglang.py")), "stop", version],
                   capture_output=True)
    started = subprocess.run([sys.executable, str(Path(__file__).with_name("real_sglang.py")), "start", version],
                             capture_output=True, text=True)
    return json.loads(started.stdout.strip().splitlines()[-1])["url"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--release", required=True, help="the running release's URL")
    parser.add_argument("--mock", required=True, help="the mock's URL, launched as the release was")
    parser.add_argument("--count", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=1976)
    parser.add_argument("--restart", metavar="RELEASE", help="start the release again when it stops answering")
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    release_url, mock_url = args.release.rstrip("/"), args.mock.rstrip("/")
    classes, examples = Counter(), {}
    outages = agree = 0
    for _ in range(args.count):
        method, path, valid, fields = rng.choice(ROUTES)
        if rng.random() < 0.05:
            path += "/"
        body, label = mutate(rng, valid, fields)
        if method == "POST" and path.startswith("/generate") and isinstance(body, dict) and rng.random() < 0.2:
            body["stream"] = True
        if path.startswith("/v1/") and "completions" in path and isinstance(body, dict) and rng.random() < 0.15:
            body["stream"] = True
            if rng.random() < 0.5:
                body["n"] = 2
        release = send(release_url, method, path, body, args.timeout)
        if release is None:
            outages += 1
            if args.restart:
                release_url = restart(args.restart)
            continue
        mock = send(mock_url, method, path, body, args.timeout)
        if path.startswith("/pause_generation"):
            for url in (release_url, mock_url):
                send(url, "POST", "/continue_generation", {}, args.timeout)
        if mock is None:
            print(f"the mock did not answer {method} {path} ({label})", file=sys.stderr)
            sys.exit(2)
        release_view, mock_view = view(release), view(mock)
        if release_view == mock_view:
            agree += 1
            continue
        key = (path, release_view["status"], mock_view["status"], difference(release_view, mock_view))
        classes[key] += 1
        examples.setdefault(key, (method, label, body, release_view, mock_view))
    for key, count in classes.most_common():
        method, label, body, release_view, mock_view = examples[key]
        print(f"{count:5}  {key[0]}  release {key[1]}  mock {key[2]}  {key[3]}  ({label})")
        shown = "(none)" if body is NO_BODY else json.dumps(body, ensure_ascii=False)
        print(f"       body: {shown[:300]}")
        print(f"       release: {json.dumps(release_view, ensure_ascii=False)[:400]}")
        print(f"       mock:    {json.dumps(mock_view, ensure_ascii=False)[:400]}")
    answered = args.count - outages
    share = 100 * agree / answered if answered else 0
    print(f"differential: {args.count} bodies, {outages} release outages, {agree} of {answered} agree ({share:.1f}%)")


if __name__ == "__main__":
    main()
