"""The trainer's side of the toy policy (``sglang_mock.policy``) against the server that serves it.

At the rollout policy a trainer's recomputed logprobs must equal the served ones as float32, bit for bit, across
temperatures, top-k / top-p, ``n > 1`` and multi-turn contexts with environment tokens; after
``/update_weights_from_disk`` the server must serve the new weights. The gradient is checked against finite
differences of the logprobs themselves.
"""

import json
import urllib.request

import numpy as np
import pytest

from sglang_mock import serve
from sglang_mock.policy import Policy, ToyPolicy

from conftest import RELEASE, generated_ids


def post(url, path, body):
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def random_policy(seed, buckets=8, scale=3.0):
    rng = np.random.default_rng(seed)
    return Policy(rng.uniform(-scale, scale, size=(buckets, 9)).astype(np.float32))


# A chat turn: <|im_start|> ids ... <|im_end|>, then an environment's tokens, in the toy vocabulary.
V = 151_936
IM_START, IM_END = V - 2, V - 1
PROMPTS = [
    [IM_START, 1000, 2000, 3000, IM_END, IM_START],
    [72, 101, 108, 343, 422, 114, 108, 100],
    [IM_START, 5000, IM_END, IM_START, 7000, 7002, 7004, IM_END, 300, 302, IM_START],
]
SAMPLERS = [
    {"temperature": 1.0},
    {"temperature": 0.7},
    {"temperature": 1.3, "top_p": 0.9},
    {"temperature": 0.8, "top_k": 5},
    {"temperature": 1.0, "min_p": 0.05},
]


def rollouts(url, n=3, max_new_tokens=40):
    """Every prompt under every sampler, ``n`` samples each: (prompt ids, sampler, answer) triples."""
    out = []
    for prompt in PROMPTS:
        for sampler in SAMPLERS:
            body = {
                "input_ids": prompt,
                "sampling_params": {**sampler, "max_new_tokens": max_new_tokens, "n": n},
                "return_logprob": True,
                "logprob_start_len": 0,
            }
            status, answer = post(url, "/generate", body)
            assert status == 200, answer
            for item in answer if isinstance(answer, list) else [answer]:
                out.append((prompt, sampler, item))
    return out


def check_against(url, model):
    """Every served logprob, output and input, equals the trainer's recompute bit for bit; returns the count."""
    checked = 0
    for prompt, sampler, item in rollouts(url):
        output = generated_ids(item)
        temperature = sampler["temperature"]
        served = np.array([row[0] for row in item["meta_info"]["output_token_logprobs"]], dtype=np.float32)
        assert [row[1] for row in item["meta_info"]["output_token_logprobs"]] == output
        mine = model.logprobs(prompt + output, len(prompt), temperature)
        np.testing.assert_array_equal(mine, served, err_msg=f"{sampler} after {prompt}")
        # The prompt's logprobs (the first has none): positions 1 .. len(prompt) - 1.
        served_in = np.array([row[0] for row in item["meta_info"]["input_token_logprobs"][1:]], dtype=np.float32)
        np.testing.assert_array_equal(model.logprobs(prompt, 1, temperature), served_in)
        checked += len(served) + len(served_in)
    return checked


def test_recomputed_logprobs_equal_the_served_ones_and_follow_a_weight_update(tmp_path):
    first, second = random_policy(1), random_policy(2)
    first.save(str(tmp_path / "step-0"))
    second.save(str(tmp_path / "step-1"))
    with serve(model_path=str(tmp_path / "step-0"), sglang_version=RELEASE) as url:
        assert check_against(url, ToyPolicy(first)) > 1000
        status, reply = post(
            url, "/update_weights_from_disk", {"model_path": str(tmp_path / "step-1"), "weight_version": "1"}
        )
        assert (status, reply["success"]) == (200, True), reply
        assert check_against(url, ToyPolicy(second)) > 1000
        # The old weights no longer explain what is served: a stale trainer would see ratios far from 1.
        prompt, sampler, item = rollouts(url, n=1)[1]
        output = generated_ids(item)
        stale = ToyPolicy(first).logprobs(prompt + output, len(prompt), sampler["temperature"])
        served = np.array([row[0] for row in item["meta_info"]["output_token_logprobs"]], dtype=np.float32)
        assert np.max(np.abs(stale - served)) > 0.01


def test_the_recompute_paths_trainers_get_wrong_are_told_apart(tmp_path):
    """The defects of the issue's evidence, each as a trainer would write it, give ratios away from 1."""
    policy = random_policy(3)
    policy.save(str(tmp_path / "p"))
    model = ToyPolicy(policy)
    with serve(model_path=str(tmp_path / "p"), sglang_version=RELEASE) as url:
        prompt = PROMPTS[2]
        body = {"input_ids": prompt, "sampling_params": {"temperature": 0.7, "max_new_tokens": 32}, "return_logprob": True}
        status, item = post(url, "/generate", body)
        assert status == 200
    output = generated_ids(item)
    served = np.array([row[0] for row in item["meta_info"]["output_token_logprobs"]], dtype=np.float32)
    tokens = prompt + output
    right = model.logprobs(tokens, len(prompt), 0.7)
    np.testing.assert_array_equal(right, served)
    wrong = {
        "the temperature forgotten": model.logprobs(tokens, len(prompt), 1.0),
        "logits one position off": model.logprobs(tokens[1:], len(prompt) - 1, 0.7),
        "the prompt's last token dropped": model.logprobs(prompt[:-1] + output, len(prompt) - 1, 0.7),
    }
    for name, values in wrong.items():
        assert values.shape == served.shape, name
        assert np.max(np.abs(np.exp(values - served) - 1)) > 1e-3, name


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.5])
def test_the_gradient_is_the_finite_difference_of_the_logprobs(temperature):
    # Offsets within the clamp, so every one takes effect; a row of zeros too (its contexts still have a gradient).
    rng = np.random.default_rng(7)
    offsets = rng.uniform(-1.5, 3.0, size=(4, 9)).astype(np.float32)
    offsets[1] = 0
    tokens = [IM_START] + [int(t) for t in rng.integers(256, V - 4, size=60)]
    start = 5
    coefficients = rng.normal(size=len(tokens) - start)
    model = ToyPolicy(Policy(offsets))
    _, grad = model.logprobs_and_grad(tokens, start, temperature, coefficients)
    h = np.float32(1e-2)
    for b in range(4):
        for s in range(9):
            up, down = offsets.copy(), offsets.copy()
            up[b, s] += h
            down[b, s] -= h
            f = lambda o: float(np.dot(coefficients, ToyPolicy(Policy(o))._logprobs(tokens, start, temperature)[0]))
            numeric = (f(up) - f(down)) / (float(up[b, s]) - float(down[b, s]))
            assert abs(numeric - grad[b, s]) < 1e-4 * max(1.0, abs(numeric)), (b, s, numeric, grad[b, s])
    assert np.count_nonzero(grad) > 20


def test_clamped_offsets_have_no_gradient_and_the_zero_policy_is_the_base_model():
    offsets = np.zeros((8, 9), dtype=np.float32)
    offsets[:, 0] = 20.0  # above the clamp
    offsets[:, 1] = -5.0  # below it
    tokens = [IM_START] + list(range(300, 400, 2))
    _, grad = ToyPolicy(Policy(offsets)).logprobs_and_grad(tokens, 1, 1.0)
    assert np.all(grad[:, :2] == 0) and np.any(grad[:, 2:] != 0)
    with serve(sglang_version=RELEASE) as url:
        body = {"input_ids": tokens, "sampling_params": {"temperature": 0.9, "max_new_tokens": 20}, "return_logprob": True}
        status, item = post(url, "/generate", body)
    output = generated_ids(item)
    served = np.array([row[0] for row in item["meta_info"]["output_token_logprobs"]], dtype=np.float32)
    np.testing.assert_array_equal(ToyPolicy().logprobs(tokens + output, len(tokens), 0.9), served)


def test_a_saved_policy_loads_back_and_the_server_reads_it(tmp_path):
    policy = random_policy(5, buckets=3)
    policy.save(str(tmp_path / "d"))
    assert Policy.load(str(tmp_path / "d")) == policy
    with serve(model_path=str(tmp_path / "d"), sglang_version=RELEASE) as url:
        # 0.5.3 serves `/get_model_info` only, with its first five keys.
        info = json.loads(urllib.request.urlopen(url + "/get_model_info").read())
    assert info["policy"]["num_buckets"] == 3
    assert info.get("architectures", ["SglangMockPolicyForCausalLM"]) == ["SglangMockPolicyForCausalLM"]
