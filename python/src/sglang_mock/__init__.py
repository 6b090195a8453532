"""Run the ``sglang-mock`` server from Python.

``serve(**flags)`` starts the server that this package installs on a free port, waits for its ready line,
yields it as a :class:`MockServer` (a ``str`` holding the base URL, with ``oracle(body)``, ``reset()``,
``audit(samples)``, ``assert_faithful(samples)`` and the flags it runs with) and stops the server on exit.
``oracle(body, **flags)`` prints nothing and starts nothing: it returns the answer the server gives to one
``/generate`` body.

``serve()`` keeps the server's ledger on (``--ledger``) unless told ``ledger=False``: the server then records
every item it serves, and ``audit(samples)`` checks a trainer's own samples against it (``witness``).

Flags are the server's command-line flags with underscores: ``serve(seed=3, sglang_version="0.5.3",
fault="abort-running;after=2", fault_rate=0.5)``. ``script`` and ``faults`` also take the rules themselves
(a list or a dict), which are written to a temporary file for the server.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import queue
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import urllib.request
from typing import Any, Dict, Iterable, Iterator, List, Optional

from .witness import AuditReport, Problem
from .witness import audit as _audit

__all__ = [
    "AuditReport",
    "MockServer",
    "Problem",
    "SglangMockError",
    "__version__",
    "binary",
    "oracle",
    "serve",
]

try:
    __version__ = importlib.metadata.version("sglang-mock")
except importlib.metadata.PackageNotFoundError:  # imported from a source tree
    __version__ = "0+unknown"

_EXE = "sglang-mock.exe" if sys.platform == "win32" else "sglang-mock"


class SglangMockError(RuntimeError):
    """The server did not start (the message holds its stderr), or the oracle refused its input."""


def binary() -> str:
    """The path of the ``sglang-mock`` binary: ``$SGLANG_MOCK_BINARY``, else the one this package installed
    beside the interpreter, else the first on ``PATH``."""
    override = os.environ.get("SGLANG_MOCK_BINARY")
    if override:
        return override
    beside = os.path.join(sysconfig.get_path("scripts"), _EXE)
    if os.path.exists(beside):
        return beside
    found = shutil.which(_EXE)
    if found:
        return found
    raise SglangMockError(
        "the sglang-mock binary is not installed: `pip install sglang-mock` puts it beside the "
        "interpreter, or set SGLANG_MOCK_BINARY"
    )


def _args(flags: Dict[str, Any], files: List[str]) -> List[str]:
    """Command-line arguments for ``flags``; rule lists become temporary files recorded in ``files``."""
    args: List[str] = []
    for key, value in flags.items():
        name = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(name)
            continue
        if key in ("script", "faults") and not isinstance(value, (str, os.PathLike)):
            fd, path = tempfile.mkstemp(prefix="sglang-mock-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(value, f)
            files.append(path)
            value = path
        args += [name, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return args


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _ready_line(process: subprocess.Popen, timeout: float) -> Optional[bytes]:
    """The first line the server prints on stdout, or ``None`` if it exits or prints nothing in ``timeout``."""
    lines: "queue.Queue[bytes]" = queue.Queue()
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True)
    reader.start()
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        return None
    return line or None


class MockServer(str):
    """A running ``sglang-mock``: the string is its base URL (``f"{server}/generate"`` works as before), and
    the object knows the flags it runs with, the oracle bound to them and how to reset the server."""

    url: str
    flags: Dict[str, Any]
    pid: int

    def __new__(cls, url: str, flags: Dict[str, Any], pid: int) -> "MockServer":
        server = super().__new__(cls, url)
        server.url = url
        server.flags = dict(flags)
        server.pid = pid
        return server

    def __repr__(self) -> str:
        return f"MockServer({self.url!r}, flags={self.flags!r})"

    def oracle(self, body: Any) -> Any:
        """:func:`oracle` with this server's flags: the answer it gives to one ``/generate`` body."""
        return oracle(body, **self.flags)

    def audit(
        self, samples: Iterable[Any], *, layout: Optional[str] = None, allow_masked_generated: bool = False
    ) -> AuditReport:
        """Audits a trainer's own samples against what this server served (its ledger): every trained token
        must have been generated by the server after exactly the context before it, with the logprob it sent,
        and the routes and weight versions must match. ``samples`` are slime/miles ``Sample`` objects, verl
        ``AgentLoopOutput``, AReaL ``ModelResponse`` or trajectory dicts, or dicts with their field names
        (``layout`` names the layout when the keys do not tell). ``allow_masked_generated`` accepts generated
        tokens with loss mask 0 (deliberate off-policy masking). A sample the server cannot read raises
        ``ValueError`` naming it, its field and the element (``samples[3].rollout_log_probs[7]: ...``)."""
        return _audit(
            self.url,
            samples,
            layout=layout,
            allow_masked_generated=allow_masked_generated,
            api_key=self.flags.get("admin_api_key") or self.flags.get("api_key"),
        )

    def assert_faithful(
        self, samples: Iterable[Any], *, layout: Optional[str] = None, allow_masked_generated: bool = False
    ) -> AuditReport:
        """:meth:`audit`, raising ``AssertionError`` with the report unless every sample is faithful (an audit
        that compared nothing, of no samples or of no trained token, is not); ``ValueError``, as :meth:`audit`,
        for a sample the server cannot read."""
        report = self.audit(samples, layout=layout, allow_masked_generated=allow_masked_generated)
        if not report.ok:
            raise AssertionError(str(report))
        return report

    def reset(self) -> None:
        """Put the server back as it started (``POST /admin/reset``): the start-up fault schedule with fresh
        counters, zero request and fault counts, no pause, the configured weight version, an empty ledger."""
        request = urllib.request.Request(self.url + "/admin/reset", data=b"{}", method="POST")
        request.add_header("Content-Type", "application/json")
        api_key = self.flags.get("admin_api_key") or self.flags.get("api_key")
        if api_key:
            request.add_header("Authorization", f"Bearer {api_key}")
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()


@contextlib.contextmanager
def serve(*, startup_timeout: float = 30.0, **flags: Any) -> Iterator[MockServer]:
    """Start ``sglang-mock`` with ``flags`` on a free port of 127.0.0.1 and yield it as a :class:`MockServer`
    (a ``str`` holding the base URL). The ledger is on (``ledger=True``) unless ``ledger=False``.

    The server binds port 0 itself and reports the port it got on its ready line, so no other process can take
    the port in between. Raises :class:`SglangMockError` with the server's stderr if it exits or is not ready
    within ``startup_timeout`` seconds. The server is stopped (SIGTERM, then SIGKILL) when the block ends.
    """
    if "host" in flags or "port" in flags:
        raise TypeError("serve() chooses host and port itself")
    # The witness is on unless the caller turns it off: a test then needs nothing else to audit its samples.
    flags = {"ledger": True, **flags}
    files: List[str] = []
    process: Optional[subprocess.Popen] = None
    try:
        command = [binary(), "--host", "127.0.0.1", "--port", "0", *_args(flags, files)]
        with tempfile.TemporaryFile() as stderr:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr
            )
            line = _ready_line(process, startup_timeout)
            try:
                ready = json.loads(line) if line is not None else None
            except ValueError:
                ready = None
            if not isinstance(ready, dict) or ready.get("event") != "ready":
                status = process.poll()
                _stop(process)
                stderr.seek(0)
                log = stderr.read().decode("utf-8", "replace")
                if status is not None:
                    state = f"exited with status {status}"
                elif line is None:
                    state = f"was not ready after {startup_timeout} s"
                else:
                    state = f"printed {line!r} instead of its ready line"
                raise SglangMockError(f"sglang-mock {state}: {' '.join(command)}\n{log}")
        yield MockServer(ready["url"], flags, ready["pid"])
    finally:
        if process is not None:
            _stop(process)
            if process.stdout is not None:
                process.stdout.close()
        for path in files:
            with contextlib.suppress(OSError):
                os.unlink(path)


def oracle(body: Any, **flags: Any) -> Any:
    """The answer the server gives to one ``/generate`` body under ``flags``, computed by ``sglang-mock
    oracle`` without a server: the JSON body, or for ``"stream": true`` the list of event payloads before
    ``[DONE]``. Timing fields are 0.0 and ids the server would generate read ``"<fresh uuid4 hex>"``.
    Raises :class:`SglangMockError` (with the error body) when the server would answer with an error."""
    files: List[str] = []
    try:
        command = [binary(), "oracle", *_args(flags, files)]
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        done = subprocess.run(
            command,
            input=data.encode() if isinstance(data, str) else data,
            capture_output=True,
            check=False,
        )
    finally:
        for path in files:
            with contextlib.suppress(OSError):
                os.unlink(path)
    out = done.stdout.decode("utf-8")
    if done.returncode != 0:
        raise SglangMockError(f"{done.stderr.decode('utf-8', 'replace').strip()}: {out.strip()}")
    if out.startswith("data: "):
        events = [e[len("data: "):] for e in out.split("\n\n") if e]
        return [json.loads(e) for e in events if e != "[DONE]"]
    return json.loads(out)
