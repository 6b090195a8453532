"""Eight upstream bugs of the #1976 class, each reproduced twice against the fixture's server: the rollout code as
it was (its samples fail the audit with the problem the bug makes, at the positions it makes it) and as it was
fixed (its samples pass). The rollout code keeps the shape of the upstream code it stands for; where upstream
awaits an HTTP client, a blocking ``requests.post`` sends the same body. Then what the audit says of what a
rollout hands it (nothing, samples of one index, a sample it cannot read), and of defects whose evidence tells
their cause: a value rounded, a re-score at another temperature, a stop token dropped from the ids, a
cumulative stream's chunks appended, a resume joined with a token twice. And the frameworks' own paths across a
weight update against a server started with no version: AReaL HEAD's resume loop, labelled with its integer
versions, and slime HEAD's partial rollout with routing replay, labelled one version per request.
"""

import base64
import copy
import json
import math
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests

from frameworks import AgentLoopMetrics, AgentLoopOutput, ModelResponse, Sample, TokenOutput

# The reproductions tokenize with `/tokenize` (0.5.15 and later) and the AReaL fix reads `weight_versions` spans
# (0.5.23), so they run against 0.5.23 whatever release the session's other tests answer as; the audit itself
# reads every release's answers alike (test_witness_properties.py runs under each).
pytestmark = pytest.mark.sglang_mock(sglang_version="0.5.23")


def post(url, body):
    response = requests.post(f"{url}/generate", json=body, timeout=30)
    response.raise_for_status()
    return response.json()


def tokenize(url, text):
    """The server's tokenizer, standing in for ``tokenizer(text, add_special_tokens=False)["input_ids"]``."""
    response = requests.post(f"{url}/tokenize", json={"prompt": text}, timeout=30)
    response.raise_for_status()
    return response.json()["tokens"]


def problems(report, kind):
    """The report's problems of ``kind``; the report is printed in the assertion when there are none."""
    found = [p for p in report.problems if p.kind == kind]
    assert found, f"no {kind} problem in:\n{report}"
    return found


# --- a. slime #1976: the multi-agent example kept the token ids and dropped the logprobs -------------------------

SAMPLING = {"max_new_tokens": 12, "temperature": 1.0}
AGENT_PROMPTS = [
    "Solve step by step: what is 17 + 25?",
    "Rewrite the best solution so far: 17 + 25 = 42.",
    "Select the best solution. Judgment:",
]


def generate_response_v030(url, template, prompt):
    """``examples/multi_agent/agent_system.py::generate_response`` at slime v0.3.0 (``d3912f4ea``)."""
    sample = copy.deepcopy(template)
    sample.prompt = prompt
    prompt_token_ids = tokenize(url, sample.prompt)
    sample.tokens = prompt_token_ids
    payload = {"input_ids": prompt_token_ids, "sampling_params": SAMPLING, "return_logprob": True}
    output = post(url, payload)
    if "output_token_logprobs" in output["meta_info"]:
        new_response_tokens = [item[1] for item in output["meta_info"]["output_token_logprobs"]]
    else:
        # abort
        new_response_tokens = []
    # Update sample with tokens directly - avoiding re-tokenization
    sample.tokens = sample.tokens + new_response_tokens
    sample.response_length += len(new_response_tokens)
    sample.response = output["text"]
    match output["meta_info"]["finish_reason"]["type"]:
        case "length":
            sample.status = Sample.Status.TRUNCATED
        case "stop":
            sample.status = Sample.Status.COMPLETED
    return sample


def generate_response_pr1995(url, template, prompt):
    """The same function after slime PR #1995 (``d719f0361``): ``item[0]`` is kept beside ``item[1]``."""
    sample = copy.deepcopy(template)
    sample.prompt = prompt
    prompt_token_ids = tokenize(url, sample.prompt)
    sample.tokens = prompt_token_ids
    payload = {"input_ids": prompt_token_ids, "sampling_params": SAMPLING, "return_logprob": True}
    output = post(url, payload)
    if "output_token_logprobs" in output["meta_info"]:
        output_token_logprobs = output["meta_info"]["output_token_logprobs"]
        new_response_tokens = [item[1] for item in output_token_logprobs]
        new_response_log_probs = [item[0] for item in output_token_logprobs]
    else:
        # abort
        new_response_tokens = []
        new_response_log_probs = []
    sample.tokens = sample.tokens + new_response_tokens
    sample.response_length += len(new_response_tokens)
    if sample.rollout_log_probs is None:
        sample.rollout_log_probs = []
    sample.rollout_log_probs += new_response_log_probs
    assert len(sample.rollout_log_probs) == sample.response_length
    sample.response = output["text"]
    match output["meta_info"]["finish_reason"]["type"]:
        case "length":
            sample.status = Sample.Status.TRUNCATED
        case "stop":
            sample.status = Sample.Status.COMPLETED
    return sample


def test_slime_1976_multi_agent_samples_without_logprobs_fail(sglang_mock):
    """slime issue #1976: the multi-agent example's ``generate_response`` (``examples/multi_agent/agent_system.py``,
    v0.3.0) built each agent's sample from ``item[1]`` of ``output_token_logprobs`` only, so every sample reached
    training with ``rollout_log_probs = None`` and GRPO crashed in ``compute_advantages_and_returns``."""
    samples = [generate_response_v030(sglang_mock, Sample(index=i), p) for i, p in enumerate(AGENT_PROMPTS)]
    report = sglang_mock.audit(samples)
    missing = problems(report, "logprobs-missing")
    assert report.kinds() == ["logprobs-missing"] * len(samples)
    # No loss mask means every response token is trained: the whole response lacks its logprobs.
    for problem, sample in zip(missing, samples):
        assert (problem.sample_id, problem.channel) == (str(sample.index), "rollout_log_probs")
        assert (problem.start, problem.end) == (0, sample.response_length)


def test_slime_1995_multi_agent_samples_keep_their_logprobs(sglang_mock):
    """slime PR #1995 (``d719f0361``) keeps ``item[0]`` in ``rollout_log_probs`` and asserts its length."""
    samples = [generate_response_pr1995(sglang_mock, Sample(index=i), p) for i, p in enumerate(AGENT_PROMPTS)]
    report = sglang_mock.assert_faithful(samples)
    assert report.checked_logprobs == sum(s.response_length for s in samples)


# --- b. training-gym PR #75: a custom multi-turn generate function that never asked for logprobs -----------------

GUESS_PROMPT = "You are playing a number guessing game.\nReturn only guesses as <answer>N</answer>."
# The toy model cannot play: scripted answers guess 10, then (told "higher") 15, the target.
GUESS_SCRIPT = [
    {"prompt_contains": "<feedback>higher", "answer": "<answer>15</answer>"},
    {"prompt_contains": "guessing game", "answer": "<answer>10</answer>"},
]
GUESS_TARGET = 15
# Room for a whole scripted answer and its <|im_end|>.
GUESS_SAMPLING = {"max_new_tokens": 32, "temperature": 1.0}


def guess_feedback(model_text):
    """The environment's answer to a turn, and whether the game is over."""
    guess = int(model_text.split("<answer>")[1].split("</answer>")[0])
    if guess == GUESS_TARGET:
        return None
    return f"\n<feedback>{'higher' if guess < GUESS_TARGET else 'lower'}</feedback>\n"


def number_guess_generate_before(url, sample, max_turns=4):
    """``number_guess_generate`` as training-gym had it (``tutorials/rl/002_multiturn/002_multiturn.py``): text
    in, text out, each segment re-tokenized afterwards, ``rollout_log_probs`` never set."""
    prompt_ids = tokenize(url, sample.prompt)
    trajectory_text = ""
    response_segments = []
    for _ in range(max_turns):
        output = post(url, {"text": f"{sample.prompt}\n{trajectory_text}".strip(), "sampling_params": GUESS_SAMPLING})
        model_text = output["text"]
        trajectory_text += model_text
        response_segments.append((model_text, 1))
        feedback_text = guess_feedback(model_text)
        if feedback_text is None:
            break
        trajectory_text += feedback_text
        response_segments.append((feedback_text, 0))
    response_token_ids, loss_masks = [], []
    for segment_text, trainable in response_segments:
        token_ids = tokenize(url, segment_text)
        response_token_ids += token_ids
        loss_masks += [trainable] * len(token_ids)
    sample.tokens = prompt_ids + response_token_ids
    sample.response_length = len(response_token_ids)
    sample.response = trajectory_text
    sample.loss_mask = loss_masks
    sample.status = Sample.Status.COMPLETED
    return sample


def number_guess_generate_fixed(url, sample, max_turns=4):
    """The same loop asking for logprobs and keeping the server's ids: each turn sends everything so far as
    ``input_ids``, and only the feedback is tokenized on the client (loss mask 0, logprob 0.0)."""
    sample.tokens = tokenize(url, sample.prompt)
    sample.loss_mask, sample.rollout_log_probs = [], []
    for _ in range(max_turns):
        output = post(url, {"input_ids": sample.tokens, "sampling_params": GUESS_SAMPLING, "return_logprob": True})
        items = output["meta_info"]["output_token_logprobs"]
        sample.tokens = sample.tokens + [item[1] for item in items]
        sample.loss_mask += [1] * len(items)
        sample.rollout_log_probs += [item[0] for item in items]
        sample.response_length += len(items)
        feedback_text = guess_feedback(output["text"])
        if feedback_text is None:
            break
        feedback_ids = tokenize(url, feedback_text)
        sample.tokens = sample.tokens + feedback_ids
        sample.loss_mask += [0] * len(feedback_ids)
        sample.rollout_log_probs += [0.0] * len(feedback_ids)
        sample.response_length += len(feedback_ids)
    sample.status = Sample.Status.COMPLETED
    return sample


@pytest.mark.sglang_mock(script=GUESS_SCRIPT)
def test_training_gym_75_number_guess_without_logprobs_fails(sglang_mock):
    """training-gym PR #75: ``number_guess_generate`` posted ``text`` without ``"return_logprob": True``,
    re-tokenized each turn's text, and never set ``sample.rollout_log_probs``: the #1976 crash in another slime
    image.

    What the audit finds besides the missing logprobs: each turn's text re-tokenizes to the ids the server
    generated (less the ``<|im_end|>`` the text leaves out), so the first turn is matched; but the sample's
    tokens are ``prompt_ids + segments`` while the second request's prompt was ``prompt + "\\n" + trajectory``,
    stripped. No request had the sample's context before turn two, so its tokens were never generated there."""
    sample = number_guess_generate_before(sglang_mock, Sample(index=0, prompt=GUESS_PROMPT))
    report = sglang_mock.audit([sample])
    trained = [i for i, m in enumerate(sample.loss_mask) if m]
    turn_two = sample.loss_mask.index(1, sample.loss_mask.index(0))
    missing = problems(report, "logprobs-missing")
    assert [(p.start, p.end) for p in missing] == [(trained[0], trained[-1] + 1)]
    never = problems(report, "never-generated")
    assert [(p.start, p.end) for p in never] == [(turn_two, len(sample.loss_mask))]
    assert set(report.kinds()) == {"logprobs-missing", "never-generated"}


@pytest.mark.sglang_mock(script=GUESS_SCRIPT)
def test_training_gym_number_guess_with_server_ids_and_logprobs_passes(sglang_mock):
    """training-gym PR #75's fix of ``number_guess_generate``: ask for logprobs and keep ``item[0]`` and the
    server's ids, sending everything so far as the next turn's ``input_ids``."""
    sample = number_guess_generate_fixed(sglang_mock, Sample(index=0, prompt=GUESS_PROMPT))
    # The game went two turns: guess 10, feedback, guess 15.
    assert sample.loss_mask.count(0) > 0
    sglang_mock.assert_faithful([sample])


# --- c. vime PR #70: a short logprob list padded with 0.0 --------------------------------------------------------


def _align_engine_tokens_and_logprobs(new_response_tokens, new_response_log_probs):
    """``slime/rollout/vllm_rollout.py::_align_engine_tokens_and_logprobs`` in vllm-project/vime (PR #70 only
    added a warning to it)."""
    n = len(new_response_tokens)
    m = len(new_response_log_probs)
    if n == 0:
        return [], []
    if m == n:
        return new_response_tokens, [float(x) for x in new_response_log_probs]
    if m > n:
        return new_response_tokens, [float(x) for x in new_response_log_probs[:n]]
    return new_response_tokens, [float(x) for x in new_response_log_probs] + [0.0] * (n - m)


class MismatchedLogprobs(ValueError):
    pass


def _engine_tokens_and_logprobs_strict(new_response_tokens, new_response_log_probs):
    """The fix: an answer whose logprobs do not pair one to one with its tokens is refused."""
    if len(new_response_log_probs) != len(new_response_tokens):
        raise MismatchedLogprobs(f"{len(new_response_log_probs)} logprobs for {len(new_response_tokens)} tokens")
    return new_response_tokens, [float(x) for x in new_response_log_probs]


def vime_generate(url, align, retries=3):
    """One rollout call of vime's generate: the ids and the logprobs of the answer, aligned by ``align``; an
    answer ``align`` refuses is asked for again."""
    sample = Sample(index=0, tokens=[1, 2, 3])
    body = {"input_ids": sample.tokens, "sampling_params": SAMPLING, "return_logprob": True}
    for _ in range(retries):
        output = post(url, body)
        lps = [item[0] for item in output["meta_info"]["output_token_logprobs"]]
        try:
            tokens, log_probs = align(output["output_ids"], lps)
        except MismatchedLogprobs:
            continue
        sample.tokens = sample.tokens + tokens
        sample.response_length = len(tokens)
        sample.rollout_log_probs = log_probs
        return sample
    raise RuntimeError("no answer with aligned logprobs")


# The first answer the server gives carries one logprob fewer than its tokens (the fault `short-logprobs`).
@pytest.mark.sglang_mock(fault="short-logprobs", fault_first=1)
def test_vime_70_zero_padded_logprobs_fail(sglang_mock):
    """vime PR #70: ``_align_engine_tokens_and_logprobs`` pads a short logprob list with 0.0 (probability 1)
    and truncates a long one, silently; the PR only adds a warning. The padded token trains with logprob 0.0."""
    sample = vime_generate(sglang_mock, _align_engine_tokens_and_logprobs)
    n = sample.response_length
    assert sample.rollout_log_probs[-1] == 0.0
    report = sglang_mock.audit([sample])
    faulted = problems(report, "faulted-answer")
    assert [(p.start, p.end) for p in faulted] == [(0, n)]
    zero = problems(report, "logprob-zero")
    assert [(p.start, p.end) for p in zero] == [(n - 1, n)]


@pytest.mark.sglang_mock(fault="short-logprobs", fault_first=1)
def test_vime_refusing_the_mismatched_answer_and_retrying_passes(sglang_mock):
    """What vime PR #70 stops short of (it only warns about the padding): an answer whose logprobs do not pair
    with its tokens is refused and asked for again, so the sample keeps the clean retry."""
    sample = vime_generate(sglang_mock, _engine_tokens_and_logprobs_strict)
    stats = requests.get(f"{sglang_mock}/admin/stats", timeout=30).json()
    assert (stats["requests"]["/generate"], stats["faults"]) == (2, {"short-logprobs": 1})
    sglang_mock.assert_faithful([sample])


# --- d. prime-rl PR #1525: logprobs computed against shifted labels and not shifted back -------------------------


def shift_tensor_left(t):
    """``src/prime_rl/trainer/rl/loss.py::shift_tensor_left`` (NumPy for torch): labels[i] = input_ids[i + 1]."""
    return np.concatenate([t[:, 1:], np.zeros((t.shape[0], 1), dtype=t.dtype)], axis=1)


def shift_tensor_right(t, pad_value=0.0):
    """``src/prime_rl/trainer/rl/loss.py::shift_tensor_right``: result[i] = t[i - 1], result[0] = pad_value."""
    return np.concatenate([np.full((t.shape[0], 1), pad_value, dtype=t.dtype), t[:, :-1]], axis=1)


def prime_rl_sample(url):
    """One prime-rl training sample: ``input_ids`` (prompt and completion), ``loss_mask`` and the inference
    logprobs, with prime-rl's convention that logprob i belongs to ``input_ids[i]`` (prompt positions 0)."""
    prompt = tokenize(url, "Compute 6 * 7.")
    out = post(url, {"input_ids": prompt, "sampling_params": SAMPLING, "return_logprob": True})
    completion = out["output_ids"]
    input_ids = np.array([prompt + completion], dtype=np.int64)
    loss_mask = np.array([[0] * len(prompt) + [1] * len(completion)], dtype=np.int64)
    inference_logprobs = np.array(
        [[0.0] * len(prompt) + [item[0] for item in out["meta_info"]["output_token_logprobs"]]], dtype=np.float32
    )
    return input_ids, loss_mask, inference_logprobs


def fused_lm_head(inference_logprobs, labels):
    """What the fused head returns at position i: log P(labels[i] | input_ids[:i + 1]). The trainer runs the
    rollout's own weights here, so that is the logprob the server sent for token i + 1."""
    assert labels.shape == inference_logprobs.shape
    return shift_tensor_left(inference_logprobs)


def test_prime_rl_1525_trainer_logprobs_off_by_one_fail(sglang_mock):
    """prime-rl PR #1525 (fused LM head, ``src/prime_rl/trainer/rl/train.py``): the head computes logprobs against
    ``labels = shift_tensor_left(input_ids)``, so ``out.logprobs[i]`` is the logprob of token i + 1, while
    ``inference_logprobs``, ``loss_mask`` and the advantages stay unshifted; a review flagged the intermediate
    revision as a one-position offset in ``trainer_logprobs - inference_logprobs``. The audit gets the trainer's
    per-token logprobs in the sample's layout (one logprob per token of ``input_ids``)."""
    input_ids, loss_mask, inference_logprobs = prime_rl_sample(sglang_mock)
    labels = shift_tensor_left(input_ids)
    trainer_logprobs = fused_lm_head(inference_logprobs, labels)
    report = sglang_mock.audit([{"input_ids": input_ids, "loss_mask": loss_mask, "logprobs": trainer_logprobs}])
    first, end = int(np.argmax(loss_mask[0])), loss_mask.shape[1]
    shifted = problems(report, "logprob-shifted")
    # Each completion token holds its successor's logprob; the last one holds the shift's 0 pad.
    assert [(p.start, p.end) for p in shifted] == [(first, end - 1)]
    zero = problems(report, "logprob-zero")
    assert [(p.start, p.end) for p in zero] == [(end - 1, end)]


def test_prime_rl_1525_shifting_the_logprobs_back_passes(sglang_mock):
    """The merged fix: ``out.logprobs = shift_tensor_right(out.logprobs, pad_value=log(1 / vocab_size))``."""
    input_ids, loss_mask, inference_logprobs = prime_rl_sample(sglang_mock)
    labels = shift_tensor_left(input_ids)
    trainer_logprobs = shift_tensor_right(fused_lm_head(inference_logprobs, labels), pad_value=np.log(1 / 151936))
    sglang_mock.assert_faithful([{"input_ids": input_ids, "loss_mask": loss_mask, "logprobs": trainer_logprobs}])


# --- e. SkyRL PR #758: a synthetic EOS trained with logprob 0.0 --------------------------------------------------

# The answer stops on a stop string (".") rather than on <|im_end|>, so its last token is not EOS.
SKYRL_SCRIPT = [{"prompt_contains": "Q:", "answer": "The sum is 5. Done"}]


def skyrl_generate(url, eos_mask):
    """The end of ``SkyRLGymGenerator.agent_loop`` (non-conversation multi-turn, one turn here): the response
    ids, loss mask and rollout logprobs, and the EOS it appends when the answer did not end with one."""
    eos_token_id = tokenize(url, "<|im_end|>")[0]
    prompt_ids = tokenize(url, "Q: what is 2 + 3?")
    out = post(url, {"input_ids": prompt_ids, "sampling_params": dict(SAMPLING, stop=["."]), "return_logprob": True})
    stop_reason = out["meta_info"]["finish_reason"]["type"]
    response_ids = list(out["output_ids"])
    loss_mask = [1] * len(response_ids)
    rollout_logprobs = [item[0] for item in out["meta_info"]["output_token_logprobs"]]
    if stop_reason != "length" and response_ids and response_ids[-1] != eos_token_id:
        response_ids.append(eos_token_id)
        loss_mask.append(eos_mask)
        if rollout_logprobs is not None:
            rollout_logprobs.append(0.0)
    # SkyRL's `TrajectoryOutput` calls the logprobs `rollout_logprobs`; the audit's generic layout `logprobs`.
    return {
        "prompt_ids": prompt_ids,
        "response_ids": response_ids,
        "loss_mask": loss_mask,
        "logprobs": rollout_logprobs,
    }


@pytest.mark.sglang_mock(script=SKYRL_SCRIPT)
def test_skyrl_758_trained_synthetic_eos_fails(sglang_mock):
    """SkyRL PR #758 (``skyrl-train/skyrl_train/generators/skyrl_gym_generator.py``, merged as ``f2ed13d01``):
    when ``stop_reason != "length"`` and the last id is not EOS, the generator appends EOS with
    ``loss_mask.append(1)`` and ``rollout_logprobs.append(0.0)``; the review's ``loss_mask.append(0)`` did not
    make it into the merge. The server never generated that EOS."""
    sample = skyrl_generate(sglang_mock, eos_mask=1)
    last = len(sample["response_ids"]) - 1
    report = sglang_mock.audit([sample])
    never = problems(report, "never-generated")
    assert [(p.start, p.end) for p in never] == [(last, last + 1)]
    assert report.kinds() == ["never-generated"]


@pytest.mark.sglang_mock(script=SKYRL_SCRIPT)
def test_skyrl_masking_the_synthetic_eos_passes(sglang_mock):
    """The fix the SkyRL PR #758 review asked for and the PR description claims: ``loss_mask.append(0)`` for the
    appended EOS, which the server did not generate."""
    sample = skyrl_generate(sglang_mock, eos_mask=0)
    assert sample["loss_mask"][-1] == 0
    sglang_mock.assert_faithful([sample])


# --- f. verl PR #6299: a gateway that skips the logprobs of a turn that has none ---------------------------------


def backend_generate(url, prompt_ids, sampling_params):
    """verl's SGLang adapter (``async_sglang_server.py``): one generation as a ``TokenOutput``; ``log_probs`` is
    ``None`` when the request did not ask for them."""
    body = {
        "input_ids": prompt_ids,
        "sampling_params": {"max_new_tokens": sampling_params["max_tokens"], "temperature": 1.0},
        "return_logprob": bool(sampling_params.get("logprobs")),
    }
    output = post(url, body)
    log_probs = None
    if "output_token_logprobs" in output["meta_info"]:
        log_probs = [float(lp) for lp, _, _ in output["meta_info"]["output_token_logprobs"]]
    return TokenOutput(token_ids=output["output_ids"], log_probs=log_probs, stop_reason="completed")


class Trajectory:
    def __init__(self, prompt_ids):
        self.prompt_ids = prompt_ids
        self.response_ids, self.response_mask, self.response_logprobs = [], [], []

    def add_observation(self, ids, sampling_params):
        # Interstitial tokens: mask 0, logprob 0.0 when the request that follows asks for logprobs.
        self.response_ids.extend(ids)
        self.response_mask.extend([0] * len(ids))
        if sampling_params.get("logprobs", False):
            self.response_logprobs.extend([0.0] * len(ids))

    def output(self, num_turns):
        return AgentLoopOutput(
            prompt_ids=self.prompt_ids,
            response_ids=self.response_ids,
            response_mask=self.response_mask,
            response_logprobs=self.response_logprobs or None,
            num_turns=num_turns,
            metrics=AgentLoopMetrics(),
        )


def gateway_generate_pr6299(url, active_trajectory, sampling_params):
    """``verl/agent/gateway/gateway.py`` of verl PR #6299 (from the review thread, gateway.py:611)."""
    output = backend_generate(url, active_trajectory.prompt_ids + active_trajectory.response_ids, sampling_params)
    response_ids = list(output.token_ids)
    active_trajectory.response_ids.extend(response_ids)
    active_trajectory.response_mask.extend([1] * len(response_ids))
    if output.log_probs is not None:
        active_trajectory.response_logprobs.extend(list(output.log_probs))


def gateway_generate_uni_agent(url, buffer, sampling_params):
    """The successor, verl-project/uni-agent ``uni_agent/gateway/session/session.py`` (``6f4a7c97``)."""
    output = backend_generate(url, buffer.prompt_ids + buffer.response_ids, sampling_params)
    response_ids = list(output.token_ids)
    buffer.response_ids.extend(response_ids)
    buffer.response_mask.extend([1] * len(response_ids))
    if sampling_params.get("logprobs", False):
        if output.log_probs is None:
            raise RuntimeError("backend omitted logprobs when requested")
        log_probs = list(output.log_probs)
        if len(log_probs) != len(response_ids):
            raise RuntimeError(f"backend logprobs must align with token_ids: got {len(log_probs)} logprobs")
        buffer.response_logprobs.extend(log_probs)
    assert len(buffer.response_logprobs) in {0, len(buffer.response_ids)}, (
        "response_logprobs must be empty or aligned with response_ids"
    )


TOOL_RESULT = [100, 101]


def two_turn_session(url, generate, first_turn_logprobs):
    """A session of two assistant turns with a tool result between them; the first turn's client may not ask
    for logprobs (an OpenAI-style call through the gateway without ``logprobs``)."""
    trajectory = Trajectory(tokenize(url, "Find the weather in Paris."))
    first = {"max_tokens": 3, "logprobs": first_turn_logprobs}
    second = {"max_tokens": 8, "logprobs": True}
    generate(url, trajectory, first)
    trajectory.add_observation(TOOL_RESULT, second)
    generate(url, trajectory, second)
    return trajectory.output(num_turns=4)


def test_verl_6299_gateway_skipping_a_turns_logprobs_fails(sglang_mock):
    """verl PR #6299 (experimental agent gateway): ``response_logprobs`` is extended only
    ``if output.log_probs is not None``, so a turn served without logprobs leaves them shorter than
    ``response_ids``, and every later logprob stands beside a token ``len(turn)`` positions earlier."""
    output = two_turn_session(sglang_mock, gateway_generate_pr6299, first_turn_logprobs=False)
    n = len(output.response_ids)
    n1 = output.response_mask.index(0)
    second = n1 + len(TOOL_RESULT)
    n2 = n - second
    assert (n1, n2) == (3, 8)
    report = sglang_mock.audit([output])
    length = problems(report, "logprobs-length")
    assert [(p.start, p.end, p.channel) for p in length] == [(n - n1, n, "response_logprobs")]
    # The first turn's tokens: no request asked for their logprobs.
    not_requested = problems(report, "logprobs-not-requested")
    assert [(p.start, p.end) for p in not_requested] == [(0, n1)]
    # The second turn's tokens hold the logprobs of the tokens n1 positions later, as far as those go.
    shifted = problems(report, "logprob-shifted")
    assert [(p.start, p.end) for p in shifted] == [(second, n - n1)]


def test_uni_agent_gateway_asking_every_turn_for_logprobs_passes(sglang_mock):
    """The fix: uni-agent raises ``backend omitted logprobs when requested`` and checks the lengths, so each
    turn asks for logprobs; the trajectory that skipped one is refused instead of trained on."""
    with pytest.raises(AssertionError, match="aligned with response_ids"):
        two_turn_session(sglang_mock, gateway_generate_uni_agent, first_turn_logprobs=False)
    output = two_turn_session(sglang_mock, gateway_generate_uni_agent, first_turn_logprobs=True)
    sglang_mock.assert_faithful([output])


# --- g. AReaL PR #1569: every token labelled with the version read after the request returned -------------------


class RemoteInfEngine:
    """The part of AReaL's ``areal/infra/remote_inf_engine.py`` that labels the tokens of one generation."""

    def __init__(self, url, version):
        self.url = url
        self._version = version

    def get_version(self):
        return self._version

    def set_version(self, version):
        self._version = version

    def agenerate(self, input_ids, versions_from_spans):
        body = {
            "input_ids": input_ids,
            "sampling_params": {"max_new_tokens": 16, "temperature": 1.0, "ignore_eos": True},
            "return_logprob": True,
        }
        result = post(self.url, body)
        output_tokens = result["output_ids"]
        output_logprobs = [item[0] for item in result["meta_info"]["output_token_logprobs"]]
        accumulated_versions = []
        if versions_from_spans:
            # The fix: each token's version from the spans the server reports.
            for span in result["meta_info"]["weight_versions"]:
                accumulated_versions.extend([int(span["version"])] * (span["end"] - span["start"]))
        else:
            accumulated_versions.extend([self.get_version()] * len(output_tokens))
        return ModelResponse(
            input_tokens=input_ids,
            output_tokens=output_tokens,
            output_logprobs=output_logprobs,
            output_versions=accumulated_versions,
            stop_reason=result["meta_info"]["finish_reason"]["type"],
        ), result["meta_info"]["weight_versions"]


def generate_across_a_weight_update(url, versions_from_spans):
    """One generation during which the trainer pushes version 2 without aborting it (``abort_all_requests:
    false``): the engine's version counter moves on before the answer comes back."""
    engine = RemoteInfEngine(url, version=1)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(engine.agenerate, [1, 2, 3], versions_from_spans)
        while requests.get(f"{url}/admin/stats", timeout=30).json()["running"] == 0:
            time.sleep(0.005)
        # A few tokens into the answer (20 ms each).
        time.sleep(0.1)
        update = {"new_version": "2", "abort_all_requests": False}
        requests.post(f"{url}/update_weight_version", json=update, timeout=30).raise_for_status()
        engine.set_version(2)
        response, spans = pending.result(timeout=30)
    assert [s["version"] for s in spans] == ["1", "2"], spans
    return response, spans[0]["end"]


@pytest.mark.sglang_mock(itl_ms=20, weight_version="1")
def test_areal_1569_versions_read_after_the_round_trip_fail(sglang_mock):
    """AReaL PR #1569: ``accumulated_versions.extend([self.get_version()] * len(gen_result.output_tokens))``
    (``areal/infra/remote_inf_engine.py``) reads the version after the HTTP round trip, so when a weight update
    lands during the request every token is labelled with the new version, and the decoupled loss treats the
    old version's tokens as on-policy."""
    response, switch = generate_across_a_weight_update(sglang_mock, versions_from_spans=False)
    assert 0 < switch < response.output_len
    report = sglang_mock.audit([response])
    mismatch = problems(report, "version-mismatch")
    assert [(p.start, p.end, p.expected, p.found) for p in mismatch] == [(0, switch, "1", "2")]
    assert report.kinds() == ["version-mismatch"]


@pytest.mark.sglang_mock(itl_ms=20, weight_version="1")
def test_areal_versions_from_the_weight_version_spans_pass(sglang_mock):
    """The fix AReaL PR #1569 calls for: each token's version from the answer's ``meta_info.weight_versions``
    spans (SGLang 0.5.23), not from the engine's counter after the round trip."""
    response, switch = generate_across_a_weight_update(sglang_mock, versions_from_spans=True)
    assert response.output_versions[switch - 1 : switch + 1] == [1, 2]
    sglang_mock.assert_faithful([response])


class ResumingInfEngine:
    """``RemoteInfEngine.agenerate`` of AReaL HEAD (``areal/infra/remote_inf_engine.py``, inclusionAI/AReaL
    ``4aef98d8``) with ``SGLangBackend`` (``areal/engine/sglang_remote.py``): the request is sent again with the
    output so far until it stops, each round labelled ``[self.get_version()] * len(output_tokens)``, and a weight
    update is ``/update_weights_from_disk`` with ``abort_all_requests`` and no ``weight_version``, after which the
    trainer calls ``set_version(version + 1)``. The workflow executor's pause is an event the loop waits on."""

    def __init__(self, url, version=0, label_each_round=True):
        self.url = url
        self._version = version
        self.label_each_round = label_each_round
        self.paused = threading.Event()
        self.waiting = threading.Event()

    def get_version(self):
        return self._version

    def set_version(self, version):
        self._version = version

    def agenerate(self, input_ids, max_new_tokens):
        input_ids = list(input_ids)
        accumulated_output_tokens, accumulated_output_logprobs, accumulated_versions = [], [], []
        version_at_start = self.get_version()
        stop_reason = None
        while stop_reason not in ["stop", "tool_calls", "length"] and len(accumulated_output_tokens) < max_new_tokens:
            while self.paused.is_set():
                self.waiting.set()
                time.sleep(0.005)
            sampling_params = {"max_new_tokens": max_new_tokens - len(accumulated_output_tokens),
                               "temperature": 1.0, "top_p": 1.0, "top_k": -1, "stop_token_ids": [],
                               "ignore_eos": False, "skip_special_tokens": True, "frequency_penalty": 0.0}
            payload = {"input_ids": input_ids.copy(), "image_data": None, "sampling_params": sampling_params,
                       "return_logprob": True, "stream": False}
            meta_info = post(self.url, payload)["meta_info"]
            stop_reason = meta_info["finish_reason"]["type"]
            output_tokens = [x[1] for x in meta_info["output_token_logprobs"]]
            accumulated_output_tokens.extend(output_tokens)
            accumulated_output_logprobs.extend(x[0] for x in meta_info["output_token_logprobs"])
            # HEAD labels each round with the version now; the defect labels every round with the first's.
            version = self.get_version() if self.label_each_round else version_at_start
            accumulated_versions.extend([version] * len(output_tokens))
            input_ids += output_tokens
            if stop_reason == "abort":
                # The abort came from the update: the executor pauses the workflow until the trainer resumes it.
                self.paused.set()
        return ModelResponse(
            input_tokens=input_ids[: len(input_ids) - len(accumulated_output_tokens)],
            output_tokens=accumulated_output_tokens,
            output_logprobs=accumulated_output_logprobs,
            output_versions=accumulated_versions,
            stop_reason="length" if stop_reason == "abort" else stop_reason,
        )


def areal_rollout_across_a_disk_update(url, weights_dir, label_each_round):
    """One generation that a weight update aborts half-way: the trainer pushes new weights from disk, labels
    them version 1 and resumes the workflow, whose loop sends the rest of the request again."""
    engine = ResumingInfEngine(url, label_each_round=label_each_round)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(engine.agenerate, [1, 2, 3], 48)
        while requests.get(f"{url}/admin/stats", timeout=30).json()["running"] == 0:
            time.sleep(0.005)
        time.sleep(0.1)
        update = {"model_path": str(weights_dir), "abort_all_requests": True}
        requests.post(f"{url}/update_weights_from_disk", json=update, timeout=30).raise_for_status()
        # The aborted round is labelled before the version moves on (the executor waits for its workflows).
        assert engine.waiting.wait(timeout=30)
        engine.set_version(engine.get_version() + 1)
        engine.paused.clear()
        return pending.result(timeout=30)


@pytest.mark.sglang_mock(itl_ms=10, sglang_version="0.5.23")
def test_areal_resumed_across_a_disk_update_passes_against_a_plain_server(sglang_mock, tmp_path):
    """AReaL labels tokens with its own integer version, counted from 0, and sends no ``weight_version`` with
    its updates: the server's version stays ``"default"`` while its weights change. The audit counts the
    weights the server loaded, so the labels 0 then 1 are checked, not taken on trust."""
    response = areal_rollout_across_a_disk_update(sglang_mock, tmp_path, label_each_round=True)
    assert response.output_len == 48 and response.output_versions[0] == 0 and response.output_versions[-1] == 1
    report = sglang_mock.audit([response])
    assert report.ok, report
    assert (report.checked_versions, report.version_fields) == (48, ["output_versions"])
    assert report.matched_items == 2


@pytest.mark.sglang_mock(itl_ms=10, sglang_version="0.5.23")
def test_areal_resumed_round_labelled_with_the_first_rounds_version_fails(sglang_mock, tmp_path):
    """The defect: a version read once, before the loop, labels the resumed round too, so the new weights'
    tokens are trained as the old policy's."""
    response = areal_rollout_across_a_disk_update(sglang_mock, tmp_path, label_each_round=False)
    assert response.output_len == 48 and set(response.output_versions) == {0}
    report = sglang_mock.audit([response])
    (mismatch,) = problems(report, "version-mismatch")
    assert (mismatch.end, mismatch.expected, mismatch.found) == (48, "default", "0")
    assert 0 < mismatch.start < 48
    assert "1 update behind" in mismatch.message, mismatch.message


# --- h. miles #861: truncation that leaves the routed experts long ---------------------------------------------

MOE = {"enable_return_routed_experts": True, "num_hidden_layers": 2, "num_experts": 8, "num_experts_per_tok": 2}


def miles_generate_with_routes(url, layers=2, topk=2):
    """A miles rollout with routing replay: the routes decoded as ``miles/rollout/sglang_rollout.py`` does, one
    row per token but the last."""
    sample = Sample(index=0, tokens=tokenize(url, "Write a long story."))
    body = {"input_ids": sample.tokens, "sampling_params": SAMPLING, "return_logprob": True,
            "return_routed_experts": True}
    output = post(url, body)
    items = output["meta_info"]["output_token_logprobs"]
    sample.tokens = sample.tokens + [item[1] for item in items]
    sample.response_length = len(items)
    sample.loss_mask = [1] * len(items)
    sample.rollout_log_probs = [item[0] for item in items]
    routes = np.frombuffer(base64.b64decode(output["meta_info"]["routed_experts"]), dtype=np.int32)
    sample.rollout_routed_experts = routes.reshape(len(sample.tokens) - 1, layers, topk)
    return sample


def _truncate_sample_output_before(sample, keep_tokens):
    """``miles/rollout/generate_utils/openai_endpoint_utils.py::_truncate_sample_output`` before the fix."""
    prompt_len = len(sample.tokens) - sample.response_length
    kept_ids = sample.tokens[prompt_len : prompt_len + keep_tokens]
    sample.tokens = sample.tokens[:prompt_len] + kept_ids
    # (upstream also sets `sample.response = tokenizer.decode(kept_ids)`; the audit reads ids, not text)
    sample.response_length = keep_tokens
    if sample.rollout_log_probs is not None:
        sample.rollout_log_probs = sample.rollout_log_probs[:keep_tokens]
    if sample.loss_mask is not None:
        sample.loss_mask = sample.loss_mask[:keep_tokens]
    sample.status = Sample.Status.TRUNCATED


def _truncate_sample_output_fixed(sample, keep_tokens):
    """The fix of miles PR #893 (commit ``f700bd8a6``): the routes are cut to ``len(tokens) - 1`` rows too."""
    prompt_len = len(sample.tokens) - sample.response_length
    _truncate_sample_output_before(sample, keep_tokens)
    if sample.rollout_routed_experts is not None:
        sample.rollout_routed_experts = sample.rollout_routed_experts[: prompt_len - 1 + keep_tokens]


@pytest.mark.sglang_mock(**MOE)
def test_miles_861_truncation_leaving_the_routes_long_fails(sglang_mock):
    """miles issue #861: ``_truncate_sample_output`` cuts ``tokens``, ``rollout_log_probs`` and ``loss_mask`` to
    fit ``max_seq_len`` but not ``rollout_routed_experts`` (``[len(tokens) - 1, layers, topk]``), so the routes
    keep rows for tokens that are gone and ``Sample.validate()`` fails under routing replay."""
    sample = miles_generate_with_routes(sglang_mock)
    rows = len(sample.rollout_routed_experts)
    _truncate_sample_output_before(sample, keep_tokens=5)
    report = sglang_mock.audit([sample])
    count = problems(report, "routes-row-count")
    assert [(p.start, p.end, p.channel) for p in count] == [(len(sample.tokens) - 1, rows, "rollout_routed_experts")]
    assert report.kinds() == ["routes-row-count"]


@pytest.mark.sglang_mock(**MOE)
def test_miles_893_truncating_the_routes_too_passes(sglang_mock):
    """miles PR #893 (commit ``f700bd8a6``, "Fix _truncate_sample_output to truncate rollout_routed_experts"):
    the routes are cut to ``prompt_len - 1 + keep_tokens`` rows with the tokens. (The fix miles merged, PR #1069,
    calls ``Sample.strip_last_output_tokens`` instead, which cuts the routes' last rows the same way.)"""
    sample = miles_generate_with_routes(sglang_mock)
    _truncate_sample_output_fixed(sample, keep_tokens=5)
    assert sample.rollout_routed_experts.shape == (len(sample.tokens) - 1, 2, 2)
    sglang_mock.assert_faithful([sample])


# --- slime HEAD: a partial rollout with routing replay, aborted for a weight update and resumed ------------------


class SlimeArgs:
    """The ``args`` slime's ``generate`` reads here (``--use-rollout-routing-replay`` on a 2-layer top-2 MoE)."""

    use_rollout_routing_replay = True
    num_layers = 2
    moe_router_topk = 2


def slime_generate(url, args, sample, sampling_params):
    """``generate`` of ``slime/rollout/sglang_rollout.py`` at THUDM/slime ``624b824a8``, text-only: the prompt
    is ``sample.tokens`` once it has any (``_prepare_prompt_ids``), so that an aborted sample resumes from its
    partial output with ``max_new_tokens`` reduced by it; the answer goes through ``append_response_tokens``."""
    assert sample.status in (Sample.Status.PENDING, Sample.Status.ABORTED), sample.status
    prompt_ids = sample.tokens if sample.tokens else tokenize(url, sample.prompt)
    sampling_params = dict(sampling_params)
    sampling_params["max_new_tokens"] -= sample.response_length
    if sampling_params["max_new_tokens"] == 0:
        sample.status = Sample.Status.TRUNCATED
        return sample
    payload = {"sampling_params": sampling_params, "return_logprob": True}
    if args.use_rollout_routing_replay:
        payload["return_routed_experts"] = True
    payload["input_ids"] = prompt_ids
    if not sample.tokens:
        sample.tokens = prompt_ids
    output = post(url, payload)
    if "output_token_logprobs" in output["meta_info"]:
        new_response_tokens = [item[1] for item in output["meta_info"]["output_token_logprobs"]]
        new_response_log_probs = [item[0] for item in output["meta_info"]["output_token_logprobs"]]
    else:
        new_response_tokens, new_response_log_probs = [], []
    sample.append_response_tokens(args, tokens=new_response_tokens, log_probs=new_response_log_probs,
                                  trainable=True, meta_info=output["meta_info"], text=output["text"])
    return sample


def slime_partial_rollout_across_an_update(url, tmp_path):
    """A group of two samples generated, aborted half-way by the rollout manager (slime's ``abort``:
    ``/abort_request`` with ``abort_all``), the weights updated from disk with ``weight_version="1"`` (slime's
    ``update_weights_from_disk`` passes ``str(self.weight_version)``), then each aborted sample generated again."""
    args = SlimeArgs()
    params = {"max_new_tokens": 40, "temperature": 1.0, "top_p": 1.0}
    group = [Sample(index=0, prompt="Write a long story."), Sample(index=0, prompt="Write a long story.")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        pending = [pool.submit(slime_generate, url, args, s, params) for s in group]
        while requests.get(f"{url}/admin/stats", timeout=30).json()["running"] < 2:
            time.sleep(0.005)
        time.sleep(0.1)
        requests.post(f"{url}/abort_request", json={"abort_all": True}, timeout=30).raise_for_status()
        group = [p.result(timeout=30) for p in pending]
    assert all(s.status == Sample.Status.ABORTED and 0 < s.response_length < 40 for s in group)
    update = {"model_path": str(tmp_path), "weight_version": "1"}
    requests.post(f"{url}/update_weights_from_disk", json=update, timeout=30).raise_for_status()
    return [slime_generate(url, args, s, params) for s in group]


@pytest.mark.sglang_mock(itl_ms=10, **MOE)
def test_slime_partial_rollout_with_routes_across_an_update_passes_against_a_plain_server(sglang_mock, tmp_path):
    """slime HEAD's own path, ``generate`` and ``Sample.append_response_tokens``: partial output kept through an
    abort, the resumed request's routes replacing the first's, one ``weight_versions`` label per request. The two
    samples of the group are distinct draws of one prompt, and each audits faithful, labels included."""
    group = slime_partial_rollout_across_an_update(sglang_mock, tmp_path)
    assert all(s.status == Sample.Status.TRUNCATED and s.response_length == 40 for s in group)
    assert [s.weight_versions for s in group] == [["default", "1"]] * 2
    assert group[0].tokens != group[1].tokens
    assert all(s.rollout_routed_experts.shape == (len(s.tokens) - 1, 2, 2) for s in group)
    report = sglang_mock.audit(group)
    assert report.ok, report
    assert (report.checked_versions, report.version_fields) == (80, ["weight_versions"])
    assert report.matched_items == 4


@pytest.mark.sglang_mock(itl_ms=10, **MOE)
def test_slime_resumed_samples_whose_labels_were_not_kept_fail(sglang_mock, tmp_path):
    """A sample rebuilt for the resume from its tokens alone (a custom rollout that copies ``tokens``,
    ``response_length``, ``rollout_log_probs`` and ``loss_mask`` into a fresh ``Sample``) keeps the resumed
    request's label only: the first answer's tokens have none."""
    group = slime_partial_rollout_across_an_update(sglang_mock, tmp_path)
    for s in group:
        s.weight_versions = s.weight_versions[1:]
    report = sglang_mock.audit(group)
    assert report.kinds() == ["version-mismatch"] * 2, report
    for p in report.problems:
        assert (p.channel, p.start, p.expected, p.found) == ("weight_versions", 0, "default", "1")


# --- i. what a rollout hands the audit: nothing, samples of one index, a sample that cannot be read --------------


def test_an_audit_of_no_samples_or_of_no_trained_token_fails(sglang_mock):
    """A dump read from a wrong path, or a filter that dropped every sample, hands the audit nothing: that is not
    a faithful rollout, and neither is one whose loss masks are all 0 (nothing was compared)."""
    report = sglang_mock.audit([])
    assert (report.ok, report.kinds()) == (False, ["nothing-audited"])
    assert (report.problems[0].sample, report.problems[0].sample_id) == (None, None)
    assert "- the batch [nothing-audited]: the audit read no samples" in str(report)
    with pytest.raises(AssertionError, match=r"\[nothing-audited\]: the audit read no samples"):
        sglang_mock.assert_faithful([])
    sample = generate_response_pr1995(sglang_mock, Sample(index=0), AGENT_PROMPTS[0])
    sample.loss_mask = [0] * sample.response_length
    report = sglang_mock.audit([sample], allow_masked_generated=True)
    assert report.kinds() == ["nothing-audited"]
    assert f"none of the {sample.response_length} tokens of the 1 sample is trained" in report.problems[0].message


def test_slime_multi_agent_samples_of_index_0_are_told_apart(sglang_mock):
    """slime's multi-agent example builds every agent's sample from one template, so all of them carry
    ``index = 0``: the report names each by its position too."""
    samples = [generate_response_v030(sglang_mock, Sample(index=0), p) for p in AGENT_PROMPTS]
    report = sglang_mock.audit(samples)
    assert [p.sample_label for p in report.problems] == [f"0 (samples[{k}])" for k in range(len(samples))]
    assert [p.sample_id for p in report.problems] == ["0"] * len(samples)
    assert "- sample 0 (samples[2]) [logprobs-missing] rollout_log_probs[0:" in str(report)
    assert str(report.problems[1]).startswith("sample 0 (samples[1]) [logprobs-missing]")


def test_a_sample_that_cannot_be_read_is_a_value_error_naming_its_field(sglang_mock):
    """A string where a logprob belongs is bad input, not an unfaithful sample: ``audit`` and ``assert_faithful``
    raise ``ValueError`` with the server's words, which name the sample, the field and the element."""
    good = generate_response_pr1995(sglang_mock, Sample(index=0), AGENT_PROMPTS[0])
    bad = copy.deepcopy(good)
    bad.rollout_log_probs[7] = "abc"
    expected = 'samples[1].rollout_log_probs[7]: expected a number, got the string "abc"'
    with pytest.raises(ValueError, match=re.escape(expected)) as raised:
        sglang_mock.audit([good, bad])
    # The server's message, not its JSON body.
    assert '"object"' not in str(raised.value)
    with pytest.raises(ValueError, match=re.escape(expected)):
        sglang_mock.assert_faithful([good, bad])
    with pytest.raises(TypeError, match=re.escape("samples[1]: cannot read a sample from int")):
        sglang_mock.audit([good, 7])


# --- j. values that are not the ones sent, and what the evidence says they are ---------------------------------


def to_bfloat16(values):
    """What ``torch.tensor(values, dtype=torch.bfloat16).float()`` holds (round to nearest, ties to even), as
    NumPy, which has no bfloat16, computes it from the float32 bits."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def distance(a, b):
    """How the report writes the distance between two float32 values: three significant digits, in e-notation
    below 0.001 (``7.7e-4``)."""
    d = abs(float(np.float32(a)) - float(np.float32(b)))
    if d < 1e-3:
        mantissa, exponent = f"{d:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{d:.{max(0, 2 - math.floor(math.log10(d)))}f}"


def test_logprobs_kept_in_bfloat16_or_rounded_are_reported_as_rounded(sglang_mock):
    """A trainer that keeps the rollout logprobs in a bfloat16 tensor, or writes them with three decimals, trains
    on values a few 1e-4 from the ones sent: the report says they are the values sent, rounded, and by how much,
    instead of calling them values from elsewhere."""
    sample = generate_response_pr1995(sglang_mock, Sample(index=0), AGENT_PROMPTS[0])
    sent = list(sample.rollout_log_probs)
    for rounded, how in ((to_bfloat16(sent), "as bfloat16 rounds it"),
                         ([round(x, 3) for x in sent], "as rounding to 3 decimals does")):
        sample.rollout_log_probs = rounded
        report = sglang_mock.audit([sample])
        differs = problems(report, "logprob-differs")
        assert report.kinds() == ["logprob-differs"] * len(differs)
        first = differs[0].start
        message = differs[0].message
        assert f"rounded: {distance(rounded[first], sent[first])} from the value sent, {how}" in message
        assert "did not come from this answer" not in message
        assert all("rounded: " in p.message for p in differs), str(report)
    sample.rollout_log_probs = sent
    sglang_mock.assert_faithful([sample])


def test_a_rescore_at_temperature_one_of_a_rollout_at_another_is_named(sglang_mock):
    """A rollout sampled at temperature 0.6 whose logprobs are then recomputed with a scoring prefill that leaves
    the temperature at its default (miles PR #1345's ``--recompute-logprobs-via-prefill`` sent temperature 0):
    the values are the model's at temperature 1, which the report says, with the temperature the rollout used."""
    prompt = tokenize(sglang_mock, AGENT_PROMPTS[0])
    rollout = post(sglang_mock, {"input_ids": prompt, "sampling_params": {"max_new_tokens": 12, "temperature": 0.6},
                                 "return_logprob": True})
    ids = [item[1] for item in rollout["meta_info"]["output_token_logprobs"]]

    def rescore(sampling_params):
        body = {"input_ids": prompt + ids, "sampling_params": dict(sampling_params, max_new_tokens=0),
                "return_logprob": True, "logprob_start_len": len(prompt) - 1}
        # The first input logprob is SGLang's None for the start position; the rest are the completion's.
        return [item[0] for item in post(sglang_mock, body)["meta_info"]["input_token_logprobs"][1:]]

    sample = {"prompt_ids": prompt, "response_ids": ids, "logprobs": rescore({})}
    report = sglang_mock.audit([sample])
    differs = problems(report, "logprob-differs")
    rid = rollout["meta_info"]["id"]
    assert (differs[0].start, differs[-1].end) == (0, len(ids)), str(report)
    assert (f"is the model's logprob of this token at temperature 1, while rid {rid} sampled at temperature 0.6"
            in differs[0].message)
    # The fix: score at the rollout's temperature.
    sglang_mock.assert_faithful([dict(sample, logprobs=rescore({"temperature": 0.6}))])


# --- k. the ids and the logprobs out of step, and what the evidence says of the join -----------------------------


@pytest.mark.sglang_mock(script=GUESS_SCRIPT)
def test_a_stop_token_dropped_from_the_ids_but_not_the_logprobs_is_named(sglang_mock):
    """A rollout that strips the trailing ``<|im_end|>`` from the ids (to decode or to append the next turn)
    and keeps every logprob has one logprob too many: the report says it is the stop token's."""
    eos = tokenize(sglang_mock, "<|im_end|>")[0]
    prompt = tokenize(sglang_mock, GUESS_PROMPT)
    out = post(sglang_mock, {"input_ids": prompt, "sampling_params": GUESS_SAMPLING, "return_logprob": True})
    assert out["meta_info"]["finish_reason"]["type"] == "stop" and out["output_ids"][-1] == eos
    ids = [item[1] for item in out["meta_info"]["output_token_logprobs"]]
    lps = [item[0] for item in out["meta_info"]["output_token_logprobs"]]
    if ids[-1] == eos:
        ids = ids[:-1]
    sample = Sample(index=0, tokens=prompt + ids, response_length=len(ids), rollout_log_probs=lps)
    report = sglang_mock.audit([sample])
    length = problems(report, "logprobs-length")
    assert [(p.start, p.end) for p in length] == [(len(ids), len(ids) + 1)]
    assert (f"rollout_log_probs[{len(ids)}], {lps[-1]!r}, is the logprob the server sent for token {eos} "
            f"(rid {out['meta_info']['id']}, output position {len(ids)}), which the sample's ids leave out: the "
            "answer's stop token (finish_reason stop)") in length[0].message
    assert "phantom" not in length[0].message
    # The fix: the logprob goes with its token.
    sample.rollout_log_probs = lps[:-1]
    sglang_mock.assert_faithful([sample])


def stream_generate(url, body):
    """The chunks of a streamed ``/generate``, each a dict."""
    chunks = []
    with requests.post(f"{url}/generate", json=dict(body, stream=True), stream=True, timeout=30) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                chunks.append(json.loads(line[len(b"data: "):]))
    return chunks


def test_the_chunks_of_a_cumulative_stream_appended_are_named(sglang_mock):
    """A streaming rollout that takes each chunk's ``output_ids`` as the ids so far (they are, by default) but
    appends each chunk's ``output_token_logprobs`` as if they were new (they are not: every chunk carries all
    of them, also where the ids come as deltas) keeps 1 + 2 + ... + n logprobs for n tokens."""
    prompt = tokenize(sglang_mock, AGENT_PROMPTS[1])
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 6, "temperature": 1.0}, "return_logprob": True}
    chunks = stream_generate(sglang_mock, body)
    ids, lps = [], []
    for chunk in chunks:
        ids = chunk["output_ids"]
        lps += [item[0] for item in chunk["meta_info"]["output_token_logprobs"]]
    sizes = [len(chunk["meta_info"]["output_token_logprobs"]) for chunk in chunks]
    assert len(ids) == 6 and sizes == [1, 2, 3, 4, 5, 6]
    report = sglang_mock.audit([{"prompt_ids": prompt, "response_ids": ids, "logprobs": lps}])
    length = problems(report, "logprobs-length")
    assert [(p.start, p.end) for p in length] == [(6, 21)]
    rid = chunks[-1]["meta_info"]["id"]
    assert (f"From logprobs[0] they are rid {rid}'s logprobs 6 times over, each time from its first (1, 2, 3, 4, "
            "5 and 6 of them): the chunks of a cumulative stream appended") in length[0].message
    assert "phantom" not in length[0].message
    # The fix: the last chunk's lists.
    last = chunks[-1]["meta_info"]["output_token_logprobs"]
    sglang_mock.assert_faithful([{"prompt_ids": prompt, "response_ids": ids, "logprobs": [item[0] for item in last]}])


def join_resumed(partial, resumed, overlap):
    """A partial output and the continuation of a request resumed from it, joined; ``overlap`` re-adds the
    partial output's last token, as a join does that counts the token it resumes from as the continuation's."""
    return partial + partial[-overlap:] + resumed if overlap else partial + resumed


def test_a_resume_whose_join_repeats_the_partial_outputs_last_token_names_the_resume(sglang_mock):
    """A generation cut after 4 tokens and resumed from the prompt plus those 4 is two answers; a join that
    repeats the partial output's last token trains on a context no request had. The ledger holds the resume for
    exactly the context before the repeated token: the report names it, and the token repeated."""
    prompt = tokenize(sglang_mock, AGENT_PROMPTS[2])
    sampling = {"temperature": 1.0}
    first = post(sglang_mock, {"input_ids": prompt, "sampling_params": dict(sampling, max_new_tokens=4),
                               "return_logprob": True})
    partial = [item[1] for item in first["meta_info"]["output_token_logprobs"]]
    partial_lps = [item[0] for item in first["meta_info"]["output_token_logprobs"]]
    second = post(sglang_mock, {"input_ids": prompt + partial, "sampling_params": dict(sampling, max_new_tokens=6),
                                "return_logprob": True})
    resumed = [item[1] for item in second["meta_info"]["output_token_logprobs"]]
    resumed_lps = [item[0] for item in second["meta_info"]["output_token_logprobs"]]
    assert partial[-1] != resumed[0]
    response = join_resumed(partial, resumed, overlap=1)
    sample = {"prompt_ids": prompt, "response_ids": response,
              "logprobs": join_resumed(partial_lps, resumed_lps, overlap=1)}
    report = sglang_mock.audit([sample])
    never = problems(report, "never-generated")
    assert [(p.start, p.end) for p in never] == [(4, len(response))]
    message = never[0].message
    assert (f"the request that continued from there is in the ledger: rid {second['meta_info']['id']}, whose prompt "
            f"is the sample's prompt plus response[:4], generated token {resumed[0]} first. The sample holds "
            f"{partial[-1]} there, which repeats the token before it (the last of rid {first['meta_info']['id']}'s "
            "output)") in message
    assert "no request continued" not in message and "SkyRL" not in message
    # The fix: no overlap.
    sglang_mock.assert_faithful([{"prompt_ids": prompt, "response_ids": join_resumed(partial, resumed, 0),
                                  "logprobs": join_resumed(partial_lps, resumed_lps, 0)}])
