"""The ``sglang_mock`` pytest fixture, registered through the ``pytest11`` entry point.

``sglang_mock`` is a running ``sglang-mock`` (a :class:`sglang_mock.MockServer`: a ``str`` holding the base
URL, with ``oracle(body)``, ``reset()`` and ``flags``). The server lives for the whole session: one server per
distinct set of flags, started the first time a test asks for it, and reset after every test that used it, so
that faults, pauses and weight versions a test sets do not leak into the next one.

Flags come from, in increasing priority: the ``sglang_mock_flags`` fixture (``{}`` unless a ``conftest.py``
overrides it for its directory), ``@pytest.mark.sglang_mock(seed=3, sglang_version="0.5.15", ...)`` on the test (or its
class or module), and an indirect parameter (a dict of flags)::

    def test_logprobs(sglang_mock):
        out = requests.post(f"{sglang_mock}/generate", json={"text": "Hi", "return_logprob": True}).json()
        assert len(out["meta_info"]["output_token_logprobs"]) == out["meta_info"]["completion_tokens"]

    @pytest.mark.parametrize("sglang_mock", [{"seed": 1}, {"seed": 2}], indirect=True)
    def test_seeds(sglang_mock): ...

    # conftest.py: every test of this directory runs against SGLang 0.5.15, slime's pinned release.
    @pytest.fixture
    def sglang_mock_flags():
        return {"sglang_version": "0.5.15"}
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Dict, Iterator

import pytest

from . import MockServer, serve


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sglang_mock(**flags): server flags (seed, profile, fault, faults, script, ...) for the sglang_mock fixture",
    )


class _Servers:
    """The session's servers, one per distinct set of flags."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._servers: Dict[str, MockServer] = {}

    def server(self, flags: Dict[str, Any]) -> MockServer:
        """The session's server for ``flags``, started on first use."""
        key = json.dumps(flags, sort_keys=True, default=str)
        if key not in self._servers:
            self._servers[key] = self._stack.enter_context(serve(**flags))
        return self._servers[key]

    def url(self, flags: Dict[str, Any]) -> str:
        """The base URL of the session's server for ``flags``."""
        return self.server(flags).url

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
def sglang_mock_flags() -> Dict[str, Any]:
    """Server flags for every ``sglang_mock`` in scope; override it in a ``conftest.py`` to set them for a
    directory. Markers and indirect parameters add to them and take precedence."""
    return {}


@pytest.fixture
def sglang_mock(
    request: pytest.FixtureRequest, sglang_mock_servers: _Servers, sglang_mock_flags: Dict[str, Any]
) -> Iterator[MockServer]:
    """A session-long ``sglang-mock`` with the flags of ``sglang_mock_flags``, the marker and the indirect
    parameter; reset after the test."""
    if not isinstance(sglang_mock_flags, dict):
        raise pytest.UsageError("the sglang_mock_flags fixture returns a dict of server flags")
    flags: Dict[str, Any] = dict(sglang_mock_flags)
    for marker in reversed(list(request.node.iter_markers("sglang_mock"))):
        if marker.args:
            raise pytest.UsageError("@pytest.mark.sglang_mock takes keyword flags only")
        flags.update(marker.kwargs)
    param = getattr(request, "param", None)
    if param is not None:
        if not isinstance(param, dict):
            raise pytest.UsageError("an indirect sglang_mock parameter is a dict of server flags")
        flags.update(param)
    server = sglang_mock_servers.server(flags)
    yield server
    server.reset()
