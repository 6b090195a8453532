# `pytester` runs a pytest session inside a test: the fixture's own tests use it to check a conftest.py override.
pytest_plugins = ["pytester"]

import os

# The release the servers of these tests answer as (scripts/test runs them once per release).
RELEASE = os.environ.get("SGLANG_MOCK_SGLANG_VERSION", "0.5.23")


def generated_ids(item):
    """An answer's generated ids: its ``output_ids`` without the prompt ids 0.5.3 puts before them (the
    detokenizer's window of ``min(prompt_tokens, 5)`` ids, mock-server/VERSIONS.md ``decode_window_ids``)."""
    window = min(item["meta_info"]["prompt_tokens"], 5) if RELEASE in ("0.5.3", "mid") else 0
    return item["output_ids"][window:]
