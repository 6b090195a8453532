"""Two mocks with different seeds behind ``sglang-router`` (``python -m sglang_router.launch_router``):
``/generate`` with logprobs, streamed and not, the OpenAI routes through the ``openai`` SDK, health and the
worker listing. Each answer through the router equals the answer of exactly one worker asked directly."""

import contextlib
import copy
import json
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import openai
import pytest

from sglang_mock import serve

import openai_strict


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def router(workers):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
               "--policy", "round_robin", "--worker-urls", *workers]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    listed = httpx.get(f"{url}/workers", timeout=2)
                    if listed.status_code == 200 and sum(w["is_healthy"] for w in listed.json()["workers"]) == 2:
                        break
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"the router did not come up: {log.read().decode(errors='replace')[-4000:]}")
                time.sleep(0.1)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.fixture(scope="module")
def cluster():
    with serve(seed=1) as first, serve(seed=2) as second:
        with router([first, second]) as url:
            yield url, [first, second]


def normalized(answer):
    """Drop what differs between two runs of one request: ids, timings, creation times, and the prefix-cache
    hits, which the requests a worker answered before decide (every case is sent to both workers first)."""
    answer = copy.deepcopy(answer)
    for item in answer if isinstance(answer, list) else [answer]:
        item.pop("id", None)
        item.pop("created", None)
        meta = item.get("meta_info", {})
        for key in ("id", "e2e_latency", "response_sent_to_client_ts", "cached_tokens", "cached_tokens_details"):
            meta.pop(key, None)
    return answer


def post(url, path, body):
    """A whole answer; OpenAI answers are validated strictly with the SDK's types."""
    if path.startswith("/v1/"):
        return openai_strict.post(url, path, body)
    response = httpx.post(f"{url}{path}", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def stream(url, path, body):
    """The payloads of a streamed answer; OpenAI chunks are validated strictly with the SDK's types."""
    if path.startswith("/v1/"):
        return openai_strict.stream(url, path, body)
    with httpx.stream("POST", f"{url}{path}", json={**body, "stream": True}, timeout=30) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[len("data: "):]) for line in lines[:-1]]


def served_by(answer, direct):
    """The one worker whose direct answer equals ``answer``."""
    matches = [i for i, own in enumerate(direct) if normalized(own) == normalized(answer)]
    assert len(matches) == 1, f"matched workers {matches}"
    return matches[0]


# Greedy: a worker answers a request the same every time (an unseeded one draws anew, MODEL.md 8.3), and the
# workers' seeds, which change the model, tell them apart.
CASES = [
    ("/generate", {"text": "Route me", "sampling_params": {"max_new_tokens": 12, "temperature": 0},
                   "return_logprob": True, "top_logprobs_num": 2}),
    ("/v1/completions", {"model": "sglang-mock/toy-model", "prompt": "Route me", "max_tokens": 12, "logprobs": 2,
                         "temperature": 0}),
    ("/v1/chat/completions", {"model": "sglang-mock/toy-model", "messages": [{"role": "user", "content": "Hi"}],
                              "max_tokens": 12, "logprobs": True, "top_logprobs": 2, "temperature": 0}),
]


@pytest.mark.parametrize("path,body", CASES)
@pytest.mark.parametrize("streamed", [False, True])
def test_each_answer_is_one_workers_answer(cluster, path, body, streamed):
    url, workers = cluster
    call = stream if streamed else post
    direct = [call(worker, path, body) for worker in workers]
    assert normalized(direct[0]) != normalized(direct[1]), "the seeds must tell the workers apart"
    seen = {served_by(call(url, path, body), direct) for _ in range(4)}
    assert seen == {0, 1}, "round robin reaches both workers"


def test_the_sdk_through_the_router(cluster):
    url, _ = cluster
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    chat = client.chat.completions.create(model="sglang-mock/toy-model", messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=8, logprobs=True)
    assert len(chat.choices[0].logprobs.content) == chat.usage.completion_tokens
    completion = client.completions.create(model="sglang-mock/toy-model", prompt="Hi", max_tokens=4, logprobs=0)
    assert len(completion.choices[0].logprobs.token_logprobs) == 4


def test_health_and_worker_listing(cluster):
    url, workers = cluster
    assert httpx.get(f"{url}/health").status_code == 200
    listed = httpx.get(f"{url}/workers").json()["workers"]
    assert sorted(w["url"] for w in listed) == sorted(workers)
    assert all(w["is_healthy"] and w["model_id"] == "sglang-mock/toy-model" for w in listed)
