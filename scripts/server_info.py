#!/usr/bin/env python3
"""Prints what each SGLang release reports about itself on `/server_info` and `/model_info`, as `sglang-mock` holds it
(`mock-core/data/info.json`).

    python3 scripts/server_info.py > mock-core/data/info.json
    python3 scripts/server_info.py --url http://127.0.0.1:PORT     # one running release, asked directly

A release's `/server_info` is its whole `ServerArgs` after the launch's resolution (about 240 fields in 0.5.3, 430
in 0.5.15, 550 in 0.5.23), then its scheduler's info and `internal_states[]`, the scheduler's own copy of its
arguments with its memory figures. Most of those values are not `ServerArgs`' defaults: the launch resolves them
(`chunked_prefill_size`, `disable_chunked_prefix_cache`, the attention backends), so they are read from a running
release and not from the class. By default they come from the golden recordings of the real releases
(`mock-server/conform/golden/<release>.jsonl`, whose first line holds the `/server_info` the release answered when the
recording started; `scripts/real_sglang.py golden` makes them from the launch `scripts/real_sglang.py start` runs:
the tiny Qwen3 on the CPU with `--max-total-tokens 65536`). With `--url` the release at that URL is asked instead.

From `/model_info` it keeps the one object that describes the server rather than the model's files: 0.5.23's
`embedding`, what the model can serve as an embedding model and which caches the launch disabled
(`resolved_embedding_plan` in `srt/configs/embedding_model_spec.py`).

The mock answers with these objects in the release's key order, writing its own flags' values into the fields its
flags set (`mock-server/src/http/info.rs`). Standard library only.
"""

import argparse
import json
import os
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "mock-server", "conform", "golden")
RELEASES = ["0.5.3", "0.5.15", "0.5.23"]


def held(server_info, model_info):
    """What the mock holds of a release's two answers."""
    out = {"server_info": server_info}
    if isinstance(model_info, dict) and "embedding" in model_info:
        out["model_info_embedding"] = model_info["embedding"]
    return out


def from_golden(release):
    """The `/server_info` the dense model's golden recording of `release` starts with, and its recorded
    `/get_model_info` exchange."""
    with open(os.path.join(GOLDEN, f"{release}.jsonl"), encoding="utf-8") as f:
        header = json.loads(f.readline())
        model_info = None
        for line in f:
            exchange = json.loads(line)
            if exchange.get("request", {}).get("path") == "/get_model_info":
                model_info = json.loads("".join(chunk["body"] for chunk in exchange["response"]["chunks"]))
                break
    info = header.get("server_info")
    if not isinstance(info, dict):
        sys.exit(f"{release}: the golden recording holds no /server_info")
    return held(info, model_info)


def ask(url, paths):
    """The JSON answer of the first of `paths` the server at `url` answers."""
    for path in paths:
        try:
            with urllib.request.urlopen(url.rstrip("/") + path, timeout=30) as reply:
                return json.load(reply)
        except OSError:
            continue
    return None


def from_url(url):
    """A running release's `/server_info` (`/get_server_info` where it has no other) and `/get_model_info`."""
    info = ask(url, ["/server_info", "/get_server_info"])
    if info is None:
        sys.exit(f"{url} answers neither /server_info nor /get_server_info")
    return info["version"], held(info, ask(url, ["/get_model_info"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="ask the release running at this URL instead of reading the recordings")
    args = parser.parse_args()
    if args.url:
        release, info = from_url(args.url)
        infos = {release: info}
    else:
        infos = {release: from_golden(release) for release in RELEASES}
    out = {
        "about": "What each release reports about itself, as scripts/server_info.py prints it from the running releases.",
        "releases": infos,
    }
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
