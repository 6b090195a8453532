"""The ``sglang_mock`` pytest fixture, registered through the ``pytest11`` entry point.

``sglang_mock`` is the base URL of a running ``sglang-mock``. The server lives for the whole session:
one server per distinct set of flags, started the first time a test asks for it. Flags come from, in
increasing priority, ``@pytest.mark.sglang_mock(seed=3, profile="mid", ...)`` on the test (or its class or
module) and an indirect parameter (a dict of flags)::

    def test_logprobs(sglang_mock):
        out = requests.post(f"{sglang_mock}/generate", json={"text": "Hi", "return_logprob": True}).json()
        assert len(out["meta_info"]["output_token_logprobs"]) == out["meta_info"]["completion_tokens"]

    @pytest.mark.parametrize("sglang_mock", [{"seed": 1}, {"seed": 2}], indirect=True)
    def test_seeds(sglang_mock): ...
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Dict, Iterator

import pytest

from . import serve


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sglang_mock(**flags): server flags (seed, profile, fault, faults, script, ...) for the sglang_mock fixture",
    )


class _Servers:
    """The session's servers, one per distinct set of flags."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._urls: Dict[str, str] = {}

    def url(self, flags: Dict[str, Any]) -> str:
        key = json.dumps(flags, sort_keys=True, default=str)
        if key not in self._urls:
            self._urls[key] = self._stack.enter_context(serve(**flags))
        return self._urls[key]

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(scope="session")
def sglang_mock_servers() -> Iterator[_Servers]:
    """The servers of this session; stopped when the session ends."""
    servers = _Servers()
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture
def sglang_mock(request: pytest.FixtureRequest, sglang_mock_servers: _Servers) -> str:
    """The base URL of a session-long ``sglang-mock`` with the flags of the marker and indirect parameter."""
    flags: Dict[str, Any] = {}
    for marker in reversed(list(request.node.iter_markers("sglang_mock"))):
        if marker.args:
            raise pytest.UsageError("@pytest.mark.sglang_mock takes keyword flags only")
        flags.update(marker.kwargs)
    param = getattr(request, "param", None)
    if param is not None:
        if not isinstance(param, dict):
            raise pytest.UsageError("an indirect sglang_mock parameter is a dict of server flags")
        flags.update(param)
    return sglang_mock_servers.url(flags)
