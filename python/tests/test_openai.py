"""The ``openai`` SDK against the mock's OpenAI-compatible routes. Every body and stream chunk read here is
validated strictly with the SDK's pydantic types (``openai_strict``)."""

import os

import httpx
import openai
import pytest
import requests

from openai.types import Completion
from openai.types.chat import ChatCompletion

from conftest import generated_ids
from openai_strict import post, stream, strict


def generate(url, body):
    return requests.post(f"{url}/generate", json=body, timeout=30).json()


CHATML = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]


def test_the_sdk_completes_and_chats(sglang_mock):
    client = openai.OpenAI(base_url=f"{sglang_mock}/v1", api_key="unused")
    raw = client.completions.with_raw_response.create(model="toy", prompt="Hello", max_tokens=5, logprobs=2)
    strict(Completion, raw.http_response.json())
    completion = raw.parse()
    assert completion.usage.completion_tokens == 5
    assert len(completion.choices[0].logprobs.token_logprobs) == 5
    raw = client.chat.completions.with_raw_response.create(
        model="toy", messages=MESSAGES, max_tokens=20, logprobs=True, top_logprobs=3, seed=9
    )
    strict(ChatCompletion, raw.http_response.json())
    chat = raw.parse()
    assert chat.choices[0].message.role == "assistant"
    assert len(chat.choices[0].logprobs.content) == chat.usage.completion_tokens
    assert all(len(t.top_logprobs) == 3 for t in chat.choices[0].logprobs.content)
    # 0.5.3 drops the seed, so its identical requests draw anew (MODEL.md 8.3): the draws start again.
    assert httpx.post(f"{sglang_mock}/admin/reset").status_code == 200
    streamed = client.chat.completions.create(
        model="toy", messages=MESSAGES, max_tokens=20, seed=9, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(streamed)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == chat.choices[0].message.content
    # SGLang always writes `reasoning_content` (null here); the SDK raises AttributeError when it is missing.
    assert all(c.choices[0].delta.reasoning_content is None for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == chat.usage.completion_tokens


def test_chat_logprobs_are_the_generate_logprobs_of_the_chatml_prompt(sglang_mock):
    body = {"model": "toy", "messages": MESSAGES, "max_tokens": 30, "logprobs": True, "top_logprobs": 2, "seed": 4}
    chat = post(sglang_mock, "/v1/chat/completions", body)
    # From 0.5.15 the chat `seed` becomes `sampling_seed`; 0.5.3 reads it and drops it, so there the native request
    # is the same sample only as the prompt's first draw again (MODEL.md 8.3).
    seeded = os.environ.get("SGLANG_MOCK_SGLANG_VERSION", "0.5.23") != "0.5.3"
    assert httpx.post(f"{sglang_mock}/admin/reset").status_code == 200
    native = generate(
        sglang_mock,
        {
            "text": CHATML,
            "sampling_params": {"max_new_tokens": 30, **({"sampling_seed": 4} if seeded else {})},
            "return_logprob": True,
            "top_logprobs_num": 2,
            "return_text_in_logprobs": True,
        },
    )
    content = chat["choices"][0]["logprobs"]["content"]
    output = native["meta_info"]["output_token_logprobs"]
    assert [(c["logprob"], c["token"]) for c in content] == [(lp, text) for lp, _, text in output]
    assert [c["bytes"] for c in content] == [list(text.encode()) for _, _, text in output]
    tops = native["meta_info"]["output_top_logprobs"]
    for entry, top in zip(content, tops):
        assert {t["token"]: t["logprob"] for t in entry["top_logprobs"]} == {text: lp for lp, _, text in top}
    assert chat["choices"][0]["message"]["content"] == native["text"]
    assert chat["usage"]["completion_tokens"] == native["meta_info"]["completion_tokens"]


def test_completion_logprobs_with_echo_are_the_generate_logprobs(sglang_mock):
    body = {"model": "toy", "prompt": "The capital of France is", "max_tokens": 6, "logprobs": 1, "echo": True}
    completion = post(sglang_mock, "/v1/completions", body)
    # The native request is the same sample: the prompt's draws start again (MODEL.md 8.3).
    assert httpx.post(f"{sglang_mock}/admin/reset").status_code == 200
    native = generate(
        sglang_mock,
        {
            "text": body["prompt"],
            "sampling_params": {"max_new_tokens": 6},
            "return_logprob": True,
            "top_logprobs_num": 1,
            "logprob_start_len": 0,
            "return_text_in_logprobs": True,
        },
    )
    meta = native["meta_info"]
    entries = meta["input_token_logprobs"] + meta["output_token_logprobs"]
    logprobs = completion["choices"][0]["logprobs"]
    assert logprobs["token_logprobs"] == [lp for lp, _, _ in entries]
    assert logprobs["tokens"] == [text for _, _, text in entries]
    assert logprobs["token_logprobs"][0] is None
    assert completion["choices"][0]["text"] == body["prompt"] + native["text"]


@pytest.mark.parametrize("n", [1, 3])
def test_batches_and_n_stream_and_validate(sglang_mock, n):
    completion = {"model": "toy", "prompt": ["Once", "Twice"], "max_tokens": 8, "n": n, "logprobs": 2,
                  "stop": ["\n"], "seed": 1}
    chat = {"model": "toy", "messages": MESSAGES, "max_completion_tokens": 8, "n": n, "logprobs": True,
            "top_logprobs": 1, "seed": 1}
    whole = post(sglang_mock, "/v1/completions", completion)
    assert len(whole["choices"]) == 2 * n
    whole_chat = post(sglang_mock, "/v1/chat/completions", chat)
    assert len(whole_chat["choices"]) == n
    options = {"stream_options": {"include_usage": True}}
    chunks = stream(sglang_mock, "/v1/completions", {**completion, **options})
    # The completions route writes its last chunk with exclude_none=True (serving_completions.py).
    assert chunks[-1]["usage"] == {key: value for key, value in whole["usage"].items() if value is not None}
    chat_chunks = stream(sglang_mock, "/v1/chat/completions", {**chat, **options})
    assert chat_chunks[-1]["usage"] == whole_chat["usage"]


def test_token_id_prompts_and_stop_token_ids(sglang_mock):
    ids = generate(sglang_mock, {"text": "Count", "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
                                 "logprob_start_len": 0})["meta_info"]["input_token_logprobs"]
    prompt = [entry[1] for entry in ids]
    greedy = post(sglang_mock, "/v1/completions", {"prompt": prompt, "max_tokens": 10, "temperature": 0})
    native = generate(sglang_mock, {"input_ids": prompt, "sampling_params": {"max_new_tokens": 10, "temperature": 0}})
    assert greedy["choices"][0]["text"] == native["text"]
    stop_id = generated_ids(native)[2]
    stopped = post(sglang_mock, "/v1/completions", {"prompt": prompt, "max_tokens": 10, "temperature": 0,
                                                    "stop_token_ids": [stop_id]})
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["choices"][0]["matched_stop"] == stop_id
    assert stopped["usage"]["completion_tokens"] == 3


def test_errors_have_openais_shape(sglang_mock):
    client = openai.OpenAI(base_url=f"{sglang_mock}/v1", api_key="unused")
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(model="toy", prompt="", max_tokens=2)
    assert error.value.body["message"] == "Prompt cannot be empty"
    response = httpx.post(f"{sglang_mock}/v1/completions", content=b'{"prompt": "x"}',
                          headers={"content-type": "text/plain"})
    assert response.status_code == 400
    error = ("{'loc': ['header', 'content-type'], 'msg': \"Unsupported Media Type: Only 'application/json' is "
             "allowed\", 'type': 'value_error'}")
    assert response.json()["message"] == f"1 validation error:\n  {error} [{error}]"


@pytest.mark.sglang_mock(fault="abort-running;after=3", fault_endpoint="/v1/chat/completions")
def test_faults_reach_the_chat_route(sglang_mock):
    # "abort" is SGLang's own finish reason, outside the SDK's literal type.
    chat = post(sglang_mock, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 10, "logprobs": True},
                validate=False)
    assert chat["choices"][0]["finish_reason"] == "abort"
    assert len(chat["choices"][0]["logprobs"]["content"]) == chat["usage"]["completion_tokens"] == 3
