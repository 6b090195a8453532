#!/usr/bin/env python3
"""Real SGLang on a machine without a GPU: install a release, serve a tiny random-weight model with it on the
CPU, stop it, so that what the mock answers can be asked of the releases themselves, and so that anyone can run
the real server offline.

    python3 scripts/real_sglang.py install 0.5.23          # once per release; cached under target/real-sglang/
    python3 scripts/real_sglang.py start 0.5.23 [--moe] [--port 0] [--foreground] [-- EXTRA SERVER FLAGS]
    python3 scripts/real_sglang.py status [RELEASE...]     # installed, running, answering: a JSON line each
    python3 scripts/real_sglang.py stop 0.5.23
    python3 scripts/real_sglang.py golden [RELEASE...]    # re-record mock-server/conform/golden/

`start` runs one server per release (a second `start` is refused while the first runs), niced, and returns once
it answers; with `--foreground` it stays with the server, exits with its status when it exits (a harness that
restarts a crashed release reads that) and stops it on SIGINT or SIGTERM.

`install` makes `target/real-sglang/<release>/venv`: torch's regular PyPI build (the CUDA build, whose `nvidia-*`
wheels it imports, runs on the CPU), SGLang's requirements from its wheel's `Requires-Dist` without the packages
that exist only for CUDA kernels, then the `sglang` wheel itself without dependencies, and stand-ins for the
kernel module SGLang imports at start-up and never calls on the CPU path (`sgl_kernel`), with start-up patches
for the one thing start-up asks of a GPU driver (pinning routed experts' host buffers, 0.5.15 and 0.5.23). About
7 GB and 2-5 minutes per release on two cores; a finished install is marked and not repeated. Checked on 0.5.3,
0.5.15 and 0.5.23: each starts and answers `/generate` and the OpenAI chat route (0.5.15 its streams too, 0.5.15
and 0.5.23 routed experts on the MoE model).

`start` builds the model directories once (`target/real-sglang/models/`: a Qwen3 of hidden size 64 and 2 layers,
and with `--moe` a Qwen3-MoE of 8 experts, 2 per token, for routed experts), both with Qwen's real tokenizer from
`scripts/qwen_tokenizer.py`, and launches

    SGLANG_USE_CPU_ENGINE=1 python -m sglang.launch_server --device cpu --load-format dummy \\
        --attention-backend torch_native --sampling-backend pytorch --disable-cuda-graph \\
        --skip-server-warmup --sleep-on-idle --max-total-tokens 65536

(`--sleep-on-idle`: without it the idle scheduler keeps a core busy; `--max-total-tokens`: left to itself SGLang
sizes its KV pool from the free memory, about 15 GB here). It returns once `/v1/models` answers (every release
serves it; 0.5.3 has no `/model_info`) and prints one JSON line, `{"url": ..., "pid": ..., "release": ...,
"log": ...}`, like `sglang-mock`'s ready line; the server runs on in the background, its output in the log, until
`stop`. Start-up takes under a minute and about 3 GB of memory; a token takes a few milliseconds.

`golden` re-records the golden recordings that the test suite judges the mock against: for each release (all
three by default) it installs and starts the release, sends it one short generation (as SGLang's own start-up
warm-up would), runs `sglang-mock conform --against URL --record
mock-server/conform/golden/<release>.jsonl` with the mock's flags for the tiny model (Qwen's tokenizer, the same
model directory, whose `config.json` gives the context of 4,096, and the same pool), stops it, then does the same
with the MoE model and routed experts (`<release>-moe.jsonl`, the releases that have them), and prints each report.
Last it prints `mock-core/data/info.json` again from the new recordings (`scripts/server_info.py`).

Standard library only; the network is needed by `install` alone (PyPI).
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME = os.path.join(ROOT, "target", "real-sglang")
WHEELS = os.path.join(HOME, "wheels")
MODELS = os.path.join(HOME, "models")
RELEASES = ("0.5.3", "0.5.15", "0.5.23")

# Requirements that exist only for CUDA (kernels, their compilers and bindings): never imported on the CPU path
# once `sgl_kernel` has a stand-in, and most have no wheel that installs without a GPU toolchain.
CUDA_ONLY = {
    "cuda-python",
    "cuda-bindings",
    "deepseek-recipe",
    "flash-attn-4",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "humming-kernels",
    "nvidia-cutlass-dsl",
    "nvidia-mathdx",
    "nvshmem4py-cu13",
    "nvshmem4py-cu12",
    "quack-kernels",
    "sgl-deep-ep",
    "sgl-deep-gemm",
    "sgl-flash-mla",
    "sgl-kernel",
    "sglang-kernel",
    "tilelang",
    "torch-memory-saver",
    "tml-renderers",
}


def log(message: str) -> None:
    print(f"real_sglang: {message}", file=sys.stderr, flush=True)


def normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def release_dir(release: str) -> str:
    return os.path.join(HOME, release)


def python_of(release: str) -> str:
    return os.path.join(release_dir(release), "venv", "bin", "python")


def pip(release: str, *args: str) -> None:
    command = [python_of(release), "-m", "pip", "--disable-pip-version-check", "--quiet", *args]
    log(" ".join(command[1:]))
    subprocess.run(command, check=True)


def sglang_wheel(release: str) -> str:
    """The release's wheel, downloaded once into the shared wheel folder."""
    os.makedirs(WHEELS, exist_ok=True)
    prefix = f"sglang-{release}-"
    found = [f for f in os.listdir(WHEELS) if f.startswith(prefix) and f.endswith(".whl")]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--quiet",
                        "--no-deps", "--dest", WHEELS, f"sglang=={release}"], check=True)
        found = [f for f in os.listdir(WHEELS) if f.startswith(prefix) and f.endswith(".whl")]
    if len(found) != 1:
        sys.exit(f"real_sglang: expected one wheel of sglang {release} in {WHEELS}, found {found}")
    return os.path.join(WHEELS, found[0])


def requirements(wheel: str) -> list[str]:
    """The wheel's unconditional `Requires-Dist` lines (no extras), without the CUDA-only packages; markers are
    left on for pip to evaluate."""
    with zipfile.ZipFile(wheel) as zf:
        metadata = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(metadata).decode().splitlines()
    wanted = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = line.split(":", 1)[1].strip()
        if "extra ==" in requirement:
            continue
        name = requirement
        for stop in "[<>=!~; (":
            name = name.split(stop, 1)[0]
        if normalise(name) in CUDA_ONLY:
            continue
        wanted.append(requirement)
    return wanted


STANDINS = '''"""Stand-ins for SGLang's GPU kernel modules on a CPU-only machine (scripts/real_sglang.py).

SGLang imports `sgl_kernel` at start-up; on the CPU path with the
torch-native attention and sampling backends none of their functions is called. A meta-path finder answers
those imports with modules whose every attribute is a function that raises if it is ever called, so that a
call would be seen, never silently served. A second finder patches what start-up would ask of a GPU driver.
"""

import importlib.abc
import importlib.machinery
import sys
import types

STANDIN_ROOTS = ("sgl_kernel",)


class _Missing:
    def __init__(self, name):
        self.__name__ = name
        self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is a stand-in: no GPU kernel on this machine")

    def __getattr__(self, name):
        return _Missing(f"{self.__name__}.{name}")

    def __mro_entries__(self, bases):
        return (object,)


class _StandinModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STANDIN_ROOTS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandinModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+cpu-standin"
        return module

    def exec_module(self, module):
        pass


def _no_host_register(*args, **kwargs):
    """`cudaHostRegister` pins host memory for copies to a GPU; without one there is nothing to pin."""
    return None


class _TorchWithoutPinning:
    """`torch` for one module, whose tensors are never pinned: pinning needs a GPU driver."""

    def __init__(self, torch):
        self._torch = torch

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def zeros(self, *args, pin_memory=False, **kwargs):
        return self._torch.zeros(*args, **kwargs)

    def empty(self, *args, pin_memory=False, **kwargs):
        return self._torch.empty(*args, **kwargs)


def _unpinned_torch(module):
    module.torch = _TorchWithoutPinning(module.torch)


def _unregistered_host_memory(module):
    module._cuda_host_register = _no_host_register


# Start-up patches, applied right after their module first executes: routed experts' capture buffers are pinned
# through CUDA when the server starts (0.5.15 allocates them pinned, 0.5.23 registers them), which fails on a
# machine without a GPU driver.
PATCHES = {
    "sglang.srt.state_capturer.base": _unpinned_torch,
    "sglang.srt.mem_cache.pool_host.common": _unregistered_host_memory,
}


class _Patcher(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                execute = spec.loader.exec_module

                def exec_module(module, execute=execute):
                    execute(module)
                    PATCHES[fullname](module)

                spec.loader.exec_module = exec_module
                return spec
        return None


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.append(_Finder())
    sys.meta_path.insert(0, _Patcher())
'''


def install(release: str) -> None:
    here = release_dir(release)
    done = os.path.join(here, ".installed")
    if os.path.exists(done):
        log(f"sglang {release} is installed in {here}")
        return
    wheel = sglang_wheel(release)
    if os.path.exists(here):
        shutil.rmtree(here)
    os.makedirs(here)
    subprocess.run([sys.executable, "-m", "venv", os.path.join(here, "venv")], check=True)
    wanted = requirements(wheel)
    # torch first, at the release's pin, so that the other requirements resolve against it.
    torch = [r for r in wanted if normalise(r.split("=")[0].split("<")[0].split(">")[0]) == "torch"]
    pip(release, "install", *torch)
    # The pin again, so that no other requirement (torchvision, unpinned) moves torch.
    pip(release, "install", *wanted)
    pip(release, "install", "--no-deps", wheel)
    site = subprocess.run([python_of(release), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(site, "sglang_cpu_standins.py"), "w") as f:
        f.write(STANDINS)
    with open(os.path.join(site, "sglang_cpu_standins.pth"), "w") as f:
        f.write("import sglang_cpu_standins\n")
    with open(done, "w") as f:
        f.write(release + "\n")
    log(f"sglang {release} installed in {here}")


def qwen_tokenizer() -> str:
    out = os.path.join(ROOT, "target", "qwen-tokenizer")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "qwen_tokenizer.py"), out], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def model_config(moe: bool) -> dict:
    """A Qwen3 small enough to run at a few milliseconds per token on a CPU, with Qwen's vocabulary."""
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "torch_dtype": "float32",
    }
    if moe:
        config.update({
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "decoder_sparse_step": 1,
            "norm_topk_prob": True,
            "mlp_only_layers": [],
            "output_router_logits": False,
            "router_aux_loss_coef": 0.001,
        })
    return config


def model_dir(moe: bool) -> str:
    name = "qwen3-moe-tiny" if moe else "qwen3-tiny"
    out = os.path.join(MODELS, name)
    config = model_config(moe)
    stamp = os.path.join(out, "config.json")
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f) == config:
                return out
    tokenizer = qwen_tokenizer()
    os.makedirs(out, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copyfile(os.path.join(tokenizer, name), os.path.join(out, name))
    with open(stamp, "w") as f:
        json.dump(config, f, indent=2)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pid_file(release: str) -> str:
    return os.path.join(release_dir(release), "server.pid")


def running(release: str) -> dict | None:
    """The server `start` left running for `release` (`{"pid", "url", "log"}`), or None; a pid file whose process
    has gone is removed."""
    path = pid_file(release)
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    # A pid file of an earlier version of this script holds the pid alone.
    server = json.loads(text) if text.startswith("{") else {"pid": int(text), "url": None, "log": None}
    try:
        os.kill(server["pid"], 0)
    except ProcessLookupError:
        os.remove(path)
        return None
    return server


def start(release: str, moe: bool, port: int, extra: list[str], timeout: float, max_total_tokens: int,
          foreground: bool = False) -> str:
    if not os.path.exists(os.path.join(release_dir(release), ".installed")):
        sys.exit(f"real_sglang: sglang {release} is not installed (python3 scripts/real_sglang.py install {release})")
    # One server per release: a second would overwrite the pid file, and `stop` could no longer end the first.
    if (server := running(release)) is not None:
        sys.exit(f"real_sglang: sglang {release} is already running (pid {server['pid']}, {server['url']}); "
                 f"python3 scripts/real_sglang.py stop {release} first")
    port = port or free_port()
    model = model_dir(moe)
    log_path = os.path.join(release_dir(release), "server.log")
    command = [python_of(release), "-m", "sglang.launch_server", "--model-path", model, "--host", "127.0.0.1",
               "--port", str(port), "--device", "cpu", "--load-format", "dummy", "--attention-backend",
               "torch_native", "--sampling-backend", "pytorch", "--disable-cuda-graph", "--skip-server-warmup",
               "--sleep-on-idle", "--max-total-tokens", str(max_total_tokens), *extra]
    # 0.5.15 derives a gRPC port as `--port + 10000` and refuses one past 65535, as a port the kernel picks can
    # make it; a port of its own (unused: gRPC stays off) keeps the check quiet.
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1")
    env.setdefault("SGLANG_GRPC_PORT", str(free_port()))
    url = f"http://127.0.0.1:{port}"
    # Niced, so that the reference yields the machine's two cores to the mock and the tests beside it.
    with open(log_path, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                   preexec_fn=lambda: os.nice(10))
    with open(pid_file(release), "w") as f:
        f.write(json.dumps({"pid": process.pid, "url": url, "log": log_path}) + "\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"real_sglang: sglang {release} exited with {process.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    print(json.dumps({"url": url, "pid": process.pid, "release": release, "log": log_path}),
                          flush=True)
                    if foreground:
                        sys.exit(attend(release, process))
                    return url
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    os.killpg(process.pid, signal.SIGTERM)
    sys.exit(f"real_sglang: sglang {release} did not answer within {timeout:.0f} s; see {log_path}")


def attend(release: str, process: subprocess.Popen) -> int:
    """`start --foreground`: stays with the server until it exits, and stops it on SIGINT or SIGTERM (its process
    group, killed outright if it has not gone 15 s later). Returns the server's exit status, so that a harness that
    restarts a crashed release sees the crash."""
    stopping: list[float] = []

    def forward(signum, _frame):
        if not stopping:
            log(f"signal {signum}: stopping sglang {release}")
            stopping.append(time.monotonic())
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    while True:
        try:
            code = process.wait(timeout=1)
            break
        except subprocess.TimeoutExpired:
            if stopping and time.monotonic() - stopping[0] > 15:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
    # The scheduler and detokenizer processes of a server that died do not outlive it.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    if os.path.exists(pid_file(release)):
        os.remove(pid_file(release))
    log(f"sglang {release} exited with {code}")
    # A server ended by a signal exits as a shell reports it: 128 + the signal.
    return 128 - code if code < 0 else code


def status(releases: list[str]) -> None:
    """One JSON line per release: installed or not, and the server `start` left running, if it answers."""
    for release in releases:
        line = {"release": release, "installed": os.path.exists(os.path.join(release_dir(release), ".installed"))}
        server = running(release)
        if server is not None:
            line.update(server)
            try:
                with urllib.request.urlopen(f"{server['url']}/v1/models", timeout=2) as r:
                    line["answering"] = r.status == 200
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                line["answering"] = False
        line["running"] = server is not None
        print(json.dumps(line), flush=True)


def stop(release: str) -> None:
    server = running(release)
    if server is None:
        log(f"no server of sglang {release} is running")
        return
    pid = server["pid"]
    path = pid_file(release)
    try:
        os.killpg(pid, signal.SIGTERM)
        for _ in range(30):
            os.kill(pid, 0)
            time.sleep(0.5)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if os.path.exists(path):
        os.remove(path)
    log(f"stopped sglang {release} (pid {pid})")


# The mock's flags for the tiny models, as the test suite gives them (`mock-server/tests/judge.rs`): the release's
# pool, and (with `--model-path`, the same directory) the context its `config.json` gives.
MOCK_FLAGS = ["--max-total-tokens", "65536"]
MOE_FLAGS = ["--enable-return-routed-experts", "--num-experts", "8", "--num-experts-per-tok", "2",
             "--num-hidden-layers", "2"]
# The releases that return routed experts.
MOE_RELEASES = ("0.5.15", "0.5.23")


def warm_up(url: str) -> None:
    """One short generation, as a server started without `--skip-server-warmup` runs at start-up: before its
    first generation 0.5.3 answers `/health` with a 503 and holds `/get_server_info` for minutes."""
    body = json.dumps({"text": "warm up", "sampling_params": {"max_new_tokens": 1}}).encode()
    request = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as r:
        r.read()


def golden(releases: list[str]) -> None:
    subprocess.run(["cargo", "build", "--quiet", "-p", "mock-server", "--bin", "sglang-mock"], cwd=ROOT, check=True)
    mock = os.path.join(ROOT, "target", "debug", "sglang-mock")
    out_dir = os.path.join(ROOT, "mock-server", "conform", "golden")
    for release in releases:
        install(release)
        runs = [(False, [])] + ([(True, ["--enable-return-routed-experts"])] if release in MOE_RELEASES else [])
        for moe, server_flags in runs:
            url = start(release, moe, 0, server_flags, 300.0, 65536)
            warm_up(url)
            name = f"{release}-moe.jsonl" if moe else f"{release}.jsonl"
            command = [mock, "conform", "--against", url, "--record", os.path.join(out_dir, name),
                       "--tokenizer", qwen_tokenizer(), "--model-path", model_dir(moe), *MOCK_FLAGS,
                       *(["--moe", *MOE_FLAGS] if moe else [])]
            try:
                report = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
            finally:
                stop(release)
            print(report.stdout, flush=True)
            if report.returncode == 2:
                sys.exit(f"real_sglang: conform could not run against sglang {release}")
    # What the releases report about themselves, which the mock answers with (`mock-core/data/info.json`).
    info = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "server_info.py")], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True, check=True)
    with open(os.path.join(ROOT, "mock-core", "data", "info.json"), "w", encoding="utf-8") as f:
        f.write(info.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("install", help="install a release under target/real-sglang/")
    p.add_argument("release", choices=RELEASES)
    p = sub.add_parser("start", help="serve the tiny model; prints a JSON ready line")
    p.add_argument("release", choices=RELEASES)
    p.add_argument("--moe", action="store_true", help="the Qwen3-MoE model (routed experts)")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for /v1/models")
    p.add_argument("--max-total-tokens", type=int, default=65536,
                   help="the KV pool in tokens (SGLang sizes it from free memory otherwise: about 15 GB here)")
    p.add_argument("--foreground", action="store_true",
                   help="stay with the server: exit with its status when it exits, stop it on SIGINT or SIGTERM")
    p = sub.add_parser("stop", help="stop the server start left running")
    p.add_argument("release", choices=RELEASES)
    p = sub.add_parser("status", help="each release: installed, running, answering (one JSON line each)")
    p.add_argument("releases", nargs="*", metavar="RELEASE", help=f"any of {', '.join(RELEASES)}; all when none")
    p = sub.add_parser("golden", help="re-record mock-server/conform/golden/ from the running releases")
    # No `choices`: argparse checks an empty `*` list against them.
    p.add_argument("releases", nargs="*", metavar="RELEASE", help=f"any of {', '.join(RELEASES)}; all when none")
    # What follows `--` goes to the server as it stands.
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:len(argv) - len(extra) - (1 if "--" in argv else 0)])
    if args.command == "install":
        install(args.release)
    elif args.command == "start":
        start(args.release, args.moe, args.port, extra, args.timeout, args.max_total_tokens, args.foreground)
    elif args.command == "status":
        status([r for r in args.releases if r in RELEASES] or list(RELEASES))
    elif args.command == "golden":
        unknown = [r for r in args.releases if r not in RELEASES]
        if unknown:
            parser.error(f"unknown release(s) {', '.join(unknown)}: expected {', '.join(RELEASES)}")
        golden(args.releases or list(RELEASES))
    else:
        stop(args.release)


if __name__ == "__main__":
    main()
