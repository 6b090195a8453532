"""Reads sglang-mock the way slime's rollout reads SGLang, with plain `requests`.

For each case (a JSON list in argv[2] of {"name", "body"}), it POSTs the body to argv[1] + "/generate" and
extracts the response tokens and logprobs exactly as slime's `sglang_rollout.generate` does: token ids from
`item[1]` and logprobs from `item[0]` of `meta_info["output_token_logprobs"]`. Streamed cases are read line by
line as SSE until `data: [DONE]`, keeping the last chunk (cumulative mode, slime's default). It checks what
slime relies on and prints what it extracted as JSON, logprobs as Python `repr` strings so the caller can
compare them bit for bit. Any failed check exits non-zero with a message.
"""

import json
import math
import sys

import requests


def fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(1)


def read_stream(response: requests.Response) -> dict:
    last = None
    done = False
    for line in response.iter_lines():
        if not line:
            continue
        if not line.startswith(b"data: "):
            fail(f"stream line without 'data: ' prefix: {line!r}")
        data = line[len(b"data: "):]
        if data == b"[DONE]":
            done = True
            break
        last = json.loads(data)
        if "error" in last:
            fail(f"error event: {last}")
    if not done:
        fail("stream ended without [DONE]")
    if last is None:
        fail("stream carried no chunk")
    return last


def extract(output: dict) -> dict:
    meta = output["meta_info"]
    if "output_token_logprobs" not in meta:
        fail(f"no output_token_logprobs in meta_info: {sorted(meta)}")
    # slime, sglang_rollout.py: tokens from item[1], logprobs from item[0].
    new_response_tokens = [item[1] for item in meta["output_token_logprobs"]]
    new_response_log_probs = [item[0] for item in meta["output_token_logprobs"]]
    if new_response_tokens != output["output_ids"]:
        fail("item[1] of output_token_logprobs disagrees with output_ids")
    if len(new_response_log_probs) != meta["completion_tokens"]:
        fail("len(output_token_logprobs) != completion_tokens")
    for lp in new_response_log_probs:
        if not isinstance(lp, float) or not math.isfinite(lp) or lp > 0:
            fail(f"logprob {lp!r} is not a finite float <= 0")
    return {
        "ids": new_response_tokens,
        "logprobs": [repr(lp) for lp in new_response_log_probs],
        "text": output["text"],
        "finish_reason": meta["finish_reason"],
    }


def main() -> None:
    url, cases = sys.argv[1], json.loads(sys.argv[2])
    results = {}
    with requests.Session() as session:
        for case in cases:
            body = case["body"]
            response = session.post(url + "/generate", json=body, stream=bool(body.get("stream")), timeout=60)
            if response.status_code != 200:
                fail(f"{case['name']}: HTTP {response.status_code}: {response.text}")
            output = read_stream(response) if body.get("stream") else response.json()
            results[case["name"]] = extract(output)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
