"""Run the ``sglang-mock`` server from Python.

``serve(**flags)`` starts the server that this package installs on a free port, waits until ``/health``
answers, yields the base URL and stops the server on exit. ``oracle(body, **flags)`` prints nothing and
starts nothing: it returns the answer the server gives to one ``/generate`` body.

Flags are the server's command-line flags with underscores: ``serve(seed=3, profile="mid",
fault="abort-running;after=2", fault_rate=0.5)``. ``script`` and ``faults`` also take the rules themselves
(a list or a dict), which are written to a temporary file for the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any, Dict, Iterator, List, Optional

__all__ = ["SglangMockError", "binary", "oracle", "serve"]

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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def serve(*, startup_timeout: float = 30.0, **flags: Any) -> Iterator[str]:
    """Start ``sglang-mock`` with ``flags`` on a free port of 127.0.0.1 and yield its base URL.

    Raises :class:`SglangMockError` with the server's stderr if it exits or is not healthy within
    ``startup_timeout`` seconds. The server is stopped (SIGTERM, then SIGKILL) when the block ends. The free
    port is found by binding port 0; if another process takes it before the server binds it, the server is
    started again on another port (three tries).
    """
    if "host" in flags or "port" in flags:
        raise TypeError("serve() chooses host and port itself")
    files: List[str] = []
    process: Optional[subprocess.Popen] = None
    try:
        args = _args(flags, files)
        for attempt in range(3):
            port = _free_port()
            command = [binary(), "--host", "127.0.0.1", "--port", str(port), *args]
            with tempfile.TemporaryFile() as stderr:
                process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
                )
                url = f"http://127.0.0.1:{port}"
                deadline = time.monotonic() + startup_timeout
                # Healthy means this process answers: another one on the port does not count.
                while process.poll() is not None or not _healthy(url):
                    if process.poll() is None and time.monotonic() <= deadline:
                        time.sleep(0.02)
                        continue
                    _stop(process)
                    stderr.seek(0)
                    log = stderr.read().decode("utf-8", "replace")
                    if "cannot bind" in log and attempt < 2:
                        break
                    state = (
                        f"exited with status {process.returncode}"
                        if time.monotonic() <= deadline
                        else f"was not healthy after {startup_timeout} s"
                    )
                    raise SglangMockError(f"sglang-mock {state}: {' '.join(command)}\n{log}")
                else:
                    yield url
                    return
    finally:
        if process is not None:
            _stop(process)
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
