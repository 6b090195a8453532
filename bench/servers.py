"""Starting a server under test for the benchmark scripts: sglang-mock on the port it picks (its ready line says
which), other servers on a free loopback port, and a wait for /health."""

import json
import os
import selectors
import socket
import subprocess
import threading
import time
import urllib.request


def prints_ready_line(binary: str) -> bool:
    """Whether this sglang-mock build prints the ready line (its `--help` describes it); older builds do not."""
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    return '"event":"ready"' in help_text


def start_mock(cmd: list[str], env: dict | None = None, timeout: float = 60.0) -> tuple[subprocess.Popen, str]:
    """Starts sglang-mock (`cmd`, without a port; `cmd[-k]` may follow `taskset -c N`) and returns the process
    and its URL once it is healthy. A build with the ready line runs on `--port 0` and says where it listens; an
    older one gets a free port. Logs go to /dev/null either way, so both builds pay the same for them."""
    binary = next(part for part in cmd if "sglang-mock" in os.path.basename(part))
    if not prints_ready_line(binary):
        port = free_port()
        proc = subprocess.Popen([*cmd, "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        return proc, url
    proc = subprocess.Popen([*cmd, "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    ready = selector.select(timeout)
    selector.close()
    line = proc.stdout.readline() if ready else b""
    event = json.loads(line) if line.startswith(b"{") else {}
    if event.get("event") != "ready":
        proc.kill()
        raise RuntimeError(f"{binary} did not print its ready line (exit status {proc.poll()}): {line[:200]!r}")
    # Nothing else goes to stdout; drain it anyway so that the server can never block on it.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    url = event["url"]
    wait_healthy(url, proc)
    return proc, url


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Polls `url + "/health"` until it answers 200; fails if `proc` exits first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before becoming healthy")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} not healthy after {timeout}s")
