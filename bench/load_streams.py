#!/usr/bin/env python3
"""Load check of `sglang-mock`: many concurrent /generate streams against one release server.

Starts `target/release/sglang-mock` on a free port, opens N connections at once (default 1,000), each streaming
one request of T tokens (default 512, `ignore_eos`), and reads every event with plain asyncio streams (no
third-party packages). It reports output tokens per second over the whole run, the most streams open at once
(between a response's head and its end), the number of failed streams (a non-200 status, a broken connection, a
missing `data: [DONE]`, or the wrong number of tokens; must be zero) and the server's peak resident memory (VmHWM
from /proc/<pid>/status). It raises its open-file limit, which the server inherits, to fit the streams.

The server runs with `--incremental-streaming-output`, so each event carries one token and the client's parsing
stays linear in the output; pass --cumulative to measure SGLang's default cumulative chunks instead.

    cargo build --release -p mock-server --bin sglang-mock
    python3 bench/load_streams.py [--streams 1000] [--tokens 512] [--cumulative] [--cpus 0,1]
                                  [--server-arg=--itl-ms=5]
"""

import argparse
import asyncio
import json
import os
import resource
import sys
import time

from servers import start_mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, "target", "release", "sglang-mock")


def vm_hwm_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


class Open:
    """Streams between their response head and their end, and the most that were at once."""

    now = 0
    peak = 0

    @classmethod
    def enter(cls) -> None:
        cls.now += 1
        cls.peak = max(cls.peak, cls.now)


async def one_stream(port: int, body: bytes, tokens: int, cumulative: bool) -> tuple[int, str]:
    """Stream one request; returns (tokens received, error or "")."""
    streaming = False
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        return 0, f"connect: {e}"
    try:
        writer.write(
            b"POST /generate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b" ", 2)[1]
        if status != b"200":
            return 0, f"status {status.decode()}"
        Open.enter()
        streaming = True
        chunked = b"transfer-encoding: chunked" in head.lower()
        events = 0
        buf = b""
        last = b""
        last_json = b""
        while True:
            if chunked:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.strip(), 16)
                if size == 0:
                    break
                data = await reader.readexactly(size + 2)
                buf += data[:-2]
            else:
                data = await reader.read(65536)
                if not data:
                    break
                buf += data
            # Complete events only; a partial one stays in the buffer.
            end = buf.rfind(b"\n\n")
            if end < 0:
                continue
            complete, buf = buf[: end + 2], buf[end + 2 :]
            events += complete.count(b"data: ")
            for event in reversed(complete.split(b"\n\n")):
                if event.startswith(b"data: {"):
                    last_json = event
                    break
            last = complete
        if not last.endswith(b"data: [DONE]\n\n"):
            return 0, "no [DONE]"
        data_events = events - 1
        if cumulative:
            got = json.loads(last_json.rsplit(b"data: ", 1)[-1])["meta_info"]["completion_tokens"]
        else:
            got = data_events
        if got != tokens:
            return got, f"{got} tokens, expected {tokens}"
        return got, ""
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        return 0, f"{type(e).__name__}: {e}"
    finally:
        if streaming:
            Open.now -= 1
        writer.close()


async def run(port: int, streams: int, tokens: int, cumulative: bool) -> tuple[int, list[str], float]:
    body = json.dumps(
        {
            "text": "load check",
            "stream": True,
            "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True},
        }
    ).encode()
    started = time.monotonic()
    results = await asyncio.gather(*(one_stream(port, body, tokens, cumulative) for _ in range(streams)))
    elapsed = time.monotonic() - started
    return sum(r[0] for r in results), [r[1] for r in results if r[1]], elapsed


def raise_fd_limit(streams: int) -> None:
    """Raises this process's open-file limit, which the server inherits, to hold every stream's socket on each side
    plus room for the runtime; the hard limit too when allowed (root, or CAP_SYS_RESOURCE)."""
    need = streams + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))
            return
        except (ValueError, OSError):
            sys.exit(f"{streams} streams need {need} open files, and the hard limit is {hard}: "
                     f"raise it (ulimit -Hn {need} as root) or pass fewer --streams")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--cumulative", action="store_true", help="SGLang's default cumulative chunks")
    ap.add_argument("--cpus", default="", help="taskset CPU list for the server, e.g. 0 or 0,1")
    ap.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra server flag, repeatable: --server-arg=--itl-ms=5 keeps every stream open for seconds",
    )
    ap.add_argument("--binary", default=BINARY, help="the sglang-mock binary (an earlier build, to compare)")
    args = ap.parse_args()
    if not os.path.exists(args.binary):
        print(f"{args.binary} is missing: cargo build --release -p mock-server --bin sglang-mock", file=sys.stderr)
        return 2
    raise_fd_limit(args.streams)

    cmd = [args.binary]
    if not args.cumulative:
        cmd.append("--incremental-streaming-output")
    cmd += args.server_arg
    if args.cpus:
        cmd = ["taskset", "-c", args.cpus] + cmd
    # Info level: an older build says where it listens only in its log.
    env = dict(os.environ, RUST_LOG="info")
    proc, url = start_mock(cmd, env=env)
    port = int(url.rsplit(":", 1)[1])
    try:
        rss_idle = vm_hwm_kib(proc.pid)
        total, errors, elapsed = asyncio.run(run(port, args.streams, args.tokens, args.cumulative))
        rss_peak = vm_hwm_kib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    mode = "cumulative" if args.cumulative else "incremental"
    extra = " ".join(args.server_arg)
    print(f"streams: {args.streams} x {args.tokens} tokens ({mode} chunks), {os.cpu_count()} cpus {extra}")
    print(f"elapsed: {elapsed:.2f} s")
    print(f"tokens/s: {total / elapsed:,.0f} ({total:,} tokens)")
    print(f"peak concurrent streams: {Open.peak:,}")
    print(f"errors: {len(errors)}")
    for e in sorted(set(errors))[:10]:
        print(f"  {errors.count(e)} x {e}")
    print(f"server peak RSS (VmHWM): {rss_peak / 1024:.1f} MiB (idle {rss_idle / 1024:.1f} MiB)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
