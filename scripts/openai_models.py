#!/usr/bin/env python3
"""Prints the OpenAI request models of SGLang releases as `sglang-mock` holds them (`mock-core/data/openai_models.json`).

    python3 scripts/openai_models.py target/py/sglang-wheels/sglang-*.whl > mock-core/data/openai_models.json

For each release it prints every field of `CompletionRequest`, `ChatCompletionRequest`, `TokenizeRequest` and
`DetokenizeRequest` (`srt/entrypoints/openai/protocol.py`; the last two from 0.5.15) in the schema's order with its
type in Pydantic's notation (`scripts/pydantic_models.py`'s; a required field's marked `!`), leaving out the fields
whose values a JSON body cannot fail or the notation does not hold (`any`).

Where a release is installed (`python3 scripts/real_sglang.py install RELEASE`), the models are read from it, in a
process that imports the server's modules in the order `sglang.launch_server` does before `protocol.py`. That
order matters: `typing` caches unions by their members as a set, so `Optional[Union[str, List[str]]]` takes the
member order of the first equal union the process built (`Optional[Union[List[str], str]]` in `io_struct.py` or
earlier in `protocol.py`), and Pydantic reports a union's errors in that order. Where it is not, the wheel's
`protocol.py` is imported on its own, in a process of its own, with a stand-in for its one import of the package
(`sglang.utils.convert_json_schema_to_str`, which a validator calls and building the schema does not): the types
are the release's, but a union that an earlier module of the server built first can list its members in another
order. The output says which way each release was read. Needs pydantic, openai and msgspec (the test command's
environment has them).
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
import types
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pydantic_models import fields  # noqa: E402

PROTOCOL = "sglang/srt/entrypoints/openai/protocol.py"
# The routes' models, where the release has them (`/tokenize` and `/detokenize` from 0.5.15).
MODELS = {"completions": "CompletionRequest", "chat": "ChatCompletionRequest", "tokenize": "TokenizeRequest",
          "detokenize": "DetokenizeRequest"}


def release_of(wheel: str) -> str:
    match = re.match(r"sglang-([0-9.]+?)(?:\.post\d+)?-", os.path.basename(wheel))
    if not match:
        sys.exit(f"{wheel}: not an sglang wheel")
    return match.group(1)


def protocol_module(wheel: str, release: str) -> types.ModuleType:
    with zipfile.ZipFile(wheel) as z:
        source = z.read(PROTOCOL).decode()
    # The stand-in for the package's one import; a fresh package object per release.
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]
    package = types.ModuleType("sglang")
    package.__path__ = []
    utils = types.ModuleType("sglang.utils")
    utils.convert_json_schema_to_str = lambda schema: json.dumps(schema)
    package.utils = utils
    sys.modules["sglang"] = package
    sys.modules["sglang.utils"] = utils
    name = f"sglang_protocol_{release.replace('.', '_')}"
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None))
    module.__file__ = f"{wheel}/{PROTOCOL}"
    # Registered before it runs: pydantic resolves the module's postponed annotations through `sys.modules`.
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def installed_python(release: str) -> str | None:
    python = os.path.join(ROOT, "target", "real-sglang", release, "venv", "bin", "python")
    done = os.path.join(ROOT, "target", "real-sglang", release, ".installed")
    return python if os.path.exists(done) and os.path.exists(python) else None


def models_of(module: types.ModuleType) -> dict:
    return {
        api: [[name, ty] for name, ty in fields(getattr(module, cls)) if ty not in ("any", "!any")]
        for api, cls in MODELS.items()
        if hasattr(module, cls)
    }


def one(source: str) -> None:
    """Prints one release's models as JSON: from the installed package (`source` is `installed`) or from a wheel."""
    if source == "installed":
        import sglang.launch_server  # noqa: F401  (the server's imports, in its order)
        from sglang.srt.entrypoints.openai import protocol
        module = protocol
    else:
        module = protocol_module(source, release_of(source))
    print(json.dumps(models_of(module)))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        one(sys.argv[2])
        return
    releases = []
    for wheel in sorted(sys.argv[1:], key=lambda w: [int(p) for p in release_of(w).split(".")]):
        release = release_of(wheel)
        python = installed_python(release)
        command = [python, __file__, "--one", "installed"] if python else [sys.executable, __file__, "--one", wheel]
        env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1")
        models = json.loads(subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout)
        print(f"{release}: read from the {'installed release' if python else 'wheel'}", file=sys.stderr)
        # One field to a line, so that a release's change reads as a diff of its lines.
        apis = []
        for api, listed in models.items():
            rows = ",\n".join(f"   {json.dumps(row)}" for row in listed)
            apis.append(f'  "{api}": [\n{rows}\n  ]')
        releases.append(f'"{release}": {{\n' + ",\n".join(apis) + "\n }")
    print("{\n " + ",\n ".join(releases) + "\n}")


if __name__ == "__main__":
    main()
