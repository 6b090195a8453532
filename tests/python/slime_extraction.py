#!/usr/bin/env python3
"""slime's two ways of reading SGLang's `output_token_logprobs`, reproduced against a live server (stdlib only).

`prefix` is the multi-agent example of slime v0.3.0 (`examples/multi_agent/agent_system.py`,
`generate_response`): it keeps `item[1]` of every entry and drops `item[0]`, so `rollout_log_probs` stays `None`
(issue #1976). It prints the samples as `Sample.to_dict()` JSON lines.

`fallback` is the fixed rollout path (`slime/rollout/sglang_rollout.py`, `generate`): when `meta_info` has no
`output_token_logprobs` (treated as an abort), both lists become empty. It prints what the server sent and what
the sample received.

Usage: slime_extraction.py prefix URL PROMPT_IDS_JSON N
       slime_extraction.py fallback URL PROMPT_IDS_JSON FAULT
"""

import json
import sys
import urllib.request


def post(url, payload, headers=None):
    request = urllib.request.Request(
        url + "/generate",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def prefix(url, prompt_ids, n):
    """v0.3.0's generate_response for `n` agent calls: ids kept, logprobs dropped."""
    for index in range(n):
        payload = {
            "input_ids": prompt_ids,
            "sampling_params": {"max_new_tokens": 16, "temperature": 1.0, "sampling_seed": index},
            "return_logprob": True,
        }
        output = post(url, payload)
        sample = {
            "index": index,
            "prompt": "p",
            "tokens": list(prompt_ids),
            "response": "",
            "response_length": 0,
            "reward": float(index % 2),
            "loss_mask": None,
            "rollout_log_probs": None,
            "status": "pending",
            "rollout_id": 0,
        }
        new_response_tokens = [item[1] for item in output["meta_info"]["output_token_logprobs"]]
        sample["tokens"] = sample["tokens"] + new_response_tokens
        sample["response_length"] += len(new_response_tokens)
        sample["response"] += output["text"]
        finish_type = output["meta_info"]["finish_reason"]["type"]
        sample["status"] = {"length": "truncated", "stop": "completed"}.get(finish_type, sample["status"])
        print(json.dumps(sample))


def fallback(url, prompt_ids, fault):
    """The fixed path's extraction of one response, with the server injecting `fault`."""
    payload = {
        "input_ids": prompt_ids,
        "sampling_params": {"max_new_tokens": 16, "temperature": 1.0, "sampling_seed": 1},
        "return_logprob": True,
    }
    output = post(url, payload, {"X-Mock-Fault": fault})
    if "output_token_logprobs" in output["meta_info"]:
        new_response_tokens = [item[1] for item in output["meta_info"]["output_token_logprobs"]]
        new_response_log_probs = [item[0] for item in output["meta_info"]["output_token_logprobs"]]
    else:
        new_response_tokens, new_response_log_probs = [], []
    print(json.dumps({
        "server_output_ids": len(output.get("output_ids", [])),
        "server_text": output["text"],
        "finish_reason": output["meta_info"]["finish_reason"],
        "sample_tokens_added": len(new_response_tokens),
        "sample_log_probs_added": len(new_response_log_probs),
    }))


if __name__ == "__main__":
    mode, url, prompt = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if mode == "prefix":
        prefix(url, prompt, int(sys.argv[4]))
    else:
        fallback(url, prompt, sys.argv[4])
