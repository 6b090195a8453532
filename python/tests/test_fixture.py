"""The installed package as a Python project uses it: the fixture, its marker and indirect parameter,
``serve()`` and its start-up errors, and ``oracle()`` against the live server."""

import copy
import json

import httpx
import pytest
import requests

from conftest import generated_ids
from sglang_mock import SglangMockError, oracle, serve


def generate(url, body):
    response = requests.post(f"{url}/generate", json=body, timeout=30)
    response.raise_for_status()
    return response.json()


def normalized(answer):
    """The server's answer with the fields that differ between runs as the oracle prints them."""
    answer = copy.deepcopy(answer)
    for item in answer if isinstance(answer, list) else [answer]:
        meta = item["meta_info"]
        meta["id"] = "<fresh uuid4 hex>"
        for key in ("e2e_latency", "response_sent_to_client_ts"):
            if key in meta:
                meta[key] = 0.0
    return answer


def test_the_fixture_serves_logprobs_for_every_token(sglang_mock):
    out = generate(sglang_mock, {"text": "Hi", "sampling_params": {"max_new_tokens": 9}, "return_logprob": True})
    logprobs = out["meta_info"]["output_token_logprobs"]
    assert [entry[1] for entry in logprobs] == generated_ids(out)
    assert len(generated_ids(out)) == out["meta_info"]["completion_tokens"] == 9
    assert all(entry[0] <= 0.0 for entry in logprobs)


@pytest.mark.sglang_mock(seed=5)
def test_the_marker_sets_the_seed(sglang_mock):
    body = {"text": "seeded", "sampling_params": {"max_new_tokens": 12}, "return_logprob": True}
    assert normalized(generate(sglang_mock, body)) == oracle(body, seed=5)
    assert normalized(generate(sglang_mock, body)) != oracle(body, seed=6)


@pytest.mark.sglang_mock(fault="abort-running;after=2")
def test_the_marker_sets_a_fault(sglang_mock):
    out = generate(sglang_mock, {"text": "x", "sampling_params": {"max_new_tokens": 8}, "return_logprob": True})
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert len(generated_ids(out)) == len(out["meta_info"]["output_token_logprobs"]) == 2


@pytest.mark.parametrize("sglang_mock", [{"profile": "mid"}], indirect=True)
def test_an_indirect_parameter_sets_the_profile(sglang_mock):
    # 0.5.3 serves the weight-version endpoint that 0.5.23 answers with 404.
    assert httpx.get(f"{sglang_mock}/get_weight_version").json() == {"weight_version": "default"}


@pytest.mark.sglang_mock(script=[{"prompt_contains": "Judge", "answer": "Score: 7"}])
def test_scripts_can_be_given_as_rules(sglang_mock):
    out = generate(sglang_mock, {"text": "Judge this", "sampling_params": {"max_new_tokens": 30}})
    assert out["text"] == "Score: 7"
    assert out["meta_info"]["finish_reason"]["type"] == "stop"


def test_the_session_shares_one_server_per_flag_set(sglang_mock, sglang_mock_servers):
    assert sglang_mock_servers.url({}) == sglang_mock


def test_serve_raises_with_the_servers_stderr():
    with pytest.raises(SglangMockError) as error:
        with serve(profile="ancient"):
            pass
    assert "ancient" in str(error.value)


def test_serve_stops_the_server_on_exit():
    with serve(seed=3) as url:
        assert httpx.get(f"{url}/health").status_code == 200
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=2)


@pytest.mark.parametrize("stream", [False, True])
def test_the_oracle_predicts_the_server(sglang_mock, stream):
    body = {
        "text": ["One", "Two"],
        "sampling_params": {"max_new_tokens": 6, "temperature": 0.8},
        "return_logprob": True,
        "top_logprobs_num": 2,
        "stream": stream,
    }
    predicted = oracle(body)
    if not stream:
        assert normalized(generate(sglang_mock, body)) == predicted
        return
    events = []
    with requests.post(f"{sglang_mock}/generate", json=body, stream=True, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                events.append(json.loads(line[len(b"data: "):]))
    assert [normalized(e) for e in events] == predicted


def test_the_oracle_raises_on_what_the_server_refuses():
    with pytest.raises(SglangMockError, match="temperature"):
        oracle({"text": "x", "sampling_params": {"temperature": -1}})


@pytest.mark.sglang_mock(seed=5)
def test_the_fixture_is_its_url_and_knows_its_flags(sglang_mock):
    assert isinstance(sglang_mock, str) and str(sglang_mock) == sglang_mock.url
    assert sglang_mock.url.startswith("http://127.0.0.1:")
    # serve() keeps the ledger on for the audit unless a test turns it off.
    assert sglang_mock.flags == {"ledger": True, "seed": 5}
    # The server reports the port it bound itself (port 0), the one in the URL.
    info = httpx.get(f"{sglang_mock}/get_server_info").json()
    assert f"http://127.0.0.1:{info['port']}" == sglang_mock.url


@pytest.mark.sglang_mock(seed=5)
def test_the_fixtures_oracle_is_bound_to_its_flags(sglang_mock):
    body = {"text": "bound", "sampling_params": {"max_new_tokens": 7}, "return_logprob": True}
    assert normalized(generate(sglang_mock, body)) == sglang_mock.oracle(body)
    # The default flags give another answer: the oracle did use seed 5.
    assert sglang_mock.oracle(body) != oracle(body)


@pytest.mark.sglang_mock(weight_version="v1")
def test_reset_clears_faults_pause_weight_version_and_counters(sglang_mock):
    body = {"text": "reset", "sampling_params": {"max_new_tokens": 3}}
    httpx.post(f"{sglang_mock}/admin/faults", json={"rules": [{"fault": "status;code=503"}]})
    assert httpx.post(f"{sglang_mock}/generate", json=body).status_code == 503
    httpx.post(f"{sglang_mock}/update_weight_version", json={"new_version": "v2"})
    httpx.post(f"{sglang_mock}/pause_generation", json={"mode": "in_place"})
    sglang_mock.reset()
    stats = httpx.get(f"{sglang_mock}/admin/stats").json()
    assert stats == {
        "requests_total": 0, "requests": {}, "faults_total": 0, "faults": {},
        "running": 0, "waiting": 0, "paused": False, "weight_version": "v1",
    }
    assert httpx.get(f"{sglang_mock}/admin/faults").json()["rules"] == []
    assert generate(sglang_mock, body)["meta_info"]["weight_version"] == "v1"


def test_reset_sends_the_api_key():
    with serve(api_key="sk-test") as server:
        assert httpx.post(f"{server}/admin/reset").status_code == 401
        server.reset()


def test_the_fixture_resets_between_tests_and_conftest_sets_flags(pytester):
    """In a directory whose conftest.py overrides ``sglang_mock_flags``: every test gets those flags, and what
    one test does to the shared server is gone for the next."""
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def sglang_mock_flags():
            return {"profile": "mid", "seed": 3}
        """
    )
    pytester.makepyfile(
        """
        import httpx
        import pytest

        def test_first_breaks_the_server(sglang_mock):
            assert sglang_mock.flags == {"ledger": True, "profile": "mid", "seed": 3}
            httpx.post(f"{sglang_mock}/admin/faults", json={"rules": [{"fault": "status;code=503"}]})
            httpx.post(f"{sglang_mock}/pause_generation", json={"mode": "in_place"})

        def test_second_finds_it_as_it_started(sglang_mock, sglang_mock_servers):
            assert sglang_mock_servers.url({"profile": "mid", "seed": 3}) == sglang_mock
            stats = httpx.get(f"{sglang_mock}/admin/stats").json()
            assert (stats["requests_total"], stats["paused"]) == (0, False)
            body = {"text": "x", "sampling_params": {"max_new_tokens": 2}}
            assert httpx.post(f"{sglang_mock}/generate", json=body).status_code == 200
            # 0.5.3 serves the endpoint 0.5.23 answers with 404: the conftest's flags are in effect.
            assert httpx.get(f"{sglang_mock}/get_weight_version").status_code == 200

        @pytest.mark.sglang_mock(seed=4)
        def test_a_marker_adds_to_the_conftest_flags(sglang_mock):
            assert sglang_mock.flags == {"ledger": True, "profile": "mid", "seed": 4}
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_the_package_is_typed_and_versioned_like_the_binary():
    import importlib.resources
    import subprocess

    import sglang_mock

    assert importlib.resources.files("sglang_mock").joinpath("py.typed").is_file()
    out = subprocess.run([sglang_mock.binary(), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["sglang-mock", sglang_mock.__version__]


def test_audit_columns_go_as_lists_when_short_and_plain_else_as_typed_arrays():
    """``bench/audit.py --short``: below 32 values a list of plain numbers is cheaper sent as it is; a longer one,
    or one that JSON cannot carry as it is (NaN, NumPy scalars), goes as a typed array, and ``None`` keeps the
    list so that the server can name the element."""
    import base64
    import math

    import numpy as np

    from sglang_mock.witness import encode_sample

    short = encode_sample({"prompt_ids": [1, 2], "response_ids": [3], "logprobs": [-0.5], "loss_mask": [True]})
    assert short == {"prompt_ids": [1, 2], "response_ids": [3], "logprobs": [-0.5], "loss_mask": [True]}
    long = encode_sample({"prompt_ids": list(range(40)), "response_ids": [3]})["prompt_ids"]
    assert (long["dtype"], long["shape"]) == ("int32", [40])
    assert list(np.frombuffer(base64.b64decode(long["b64"]), dtype="<i4")) == list(range(40))
    nan = encode_sample({"prompt_ids": [1], "response_ids": [3], "logprobs": [math.nan]})["logprobs"]
    assert nan["dtype"] == "float32" and math.isnan(np.frombuffer(base64.b64decode(nan["b64"]), "<f4")[0])
    scalars = encode_sample({"prompt_ids": [np.int64(7)], "response_ids": [3]})["prompt_ids"]
    assert scalars["dtype"] in ("int32", "int64")
    json.dumps(scalars)
    assert encode_sample({"prompt_ids": [1], "response_ids": [3], "logprobs": [None]})["logprobs"] == [None]
