"""Seeded random properties of the audit against the fixture's server: multi-turn samples built faithfully pass in
every layout (slime, verl, AReaL trajectories, generic; lists or NumPy arrays), and any single corruption of one
channel at one position is reported at that position with the kind it is. Plain ``random.Random(seed)`` loops, so
a failure names its seed and replays exactly.
"""

import random
from dataclasses import dataclass, replace

import numpy as np
import pytest
import requests

from frameworks import AgentLoopMetrics, AgentLoopOutput, Sample

# AReaL counts versions with ints; a numeric server version lets every layout carry the same labels.
VERSION = "3"
pytestmark = pytest.mark.sglang_mock(weight_version=VERSION)

LAYOUTS = ("slime", "verl", "areal-trajectory", "generic")


def post(url, body):
    response = requests.post(f"{url}/generate", json=body, timeout=30)
    response.raise_for_status()
    return response.json()


@dataclass(frozen=True)
class Rollout:
    """One multi-turn rollout in response coordinates: the prompt, then per response token its id, loss mask,
    logprob (0.0 for environment tokens) and weight version (``None`` for environment tokens)."""

    prompt: tuple
    ids: tuple
    mask: tuple
    logprobs: tuple
    versions: tuple


def rollout(url, rng):
    """1-4 turns with environment tokens between them; each turn's prompt is everything so far."""
    prompt = [rng.randrange(256, 20000) for _ in range(rng.randint(1, 6))]
    ids, mask, logprobs, versions = [], [], [], []
    for turn in range(rng.randint(1, 4)):
        if turn:
            env = [rng.randrange(256, 20000) for _ in range(rng.randint(1, 3))]
            ids += env
            mask += [0] * len(env)
            logprobs += [0.0] * len(env)
            versions += [None] * len(env)
        body = {
            "input_ids": prompt + ids,
            "sampling_params": {"max_new_tokens": rng.randint(1, 8), "temperature": 1.0},
            "return_logprob": True,
        }
        meta = post(url, body)["meta_info"]
        ids += [item[1] for item in meta["output_token_logprobs"]]
        mask += [1] * len(meta["output_token_logprobs"])
        logprobs += [item[0] for item in meta["output_token_logprobs"]]
        # 0.5.23 reports which version made which tokens; an earlier release made them all with the one it reports.
        n = len(meta["output_token_logprobs"])
        for span in meta.get("weight_versions") or [{"version": meta["weight_version"], "start": 0, "end": n}]:
            versions += [span["version"]] * (span["end"] - span["start"])
    return Rollout(tuple(prompt), tuple(ids), tuple(mask), tuple(logprobs), tuple(versions))


def spans(versions):
    """Per-token versions as ``weight_version_spans`` over response positions; environment tokens have none."""
    out = []
    for i, v in enumerate(versions):
        if v is None:
            continue
        if out and out[-1]["version"] == v and out[-1]["end"] == i:
            out[-1]["end"] = i + 1
        else:
            out.append({"version": v, "start": i, "end": i + 1})
    return out


def numeric(versions):
    return [-1 if v is None else int(v) for v in versions]


def render(r, layout, index, as_numpy=False, rng=None):
    """The rollout as ``layout`` holds it, and the offset of response position 0 in its per-token arrays."""
    col = (lambda values, dtype: np.asarray(values, dtype=dtype)) if as_numpy else (lambda values, dtype: list(values))
    prompt, ids, mask, lps = list(r.prompt), list(r.ids), list(r.mask), list(r.logprobs)
    if layout == "slime":
        sample = Sample(
            index=index,
            tokens=col(prompt + ids, np.int64),
            response_length=len(ids),
            loss_mask=col(mask, np.int32),
            rollout_log_probs=col(lps, np.float32),
            status=Sample.Status.COMPLETED,
        )
        # slime keeps one version per engine call; the audit reads per-token versions from the rollout client's
        # spans, which `to_dict()` carries like any attribute set on the sample.
        sample.weight_version_spans = spans(r.versions)
        return sample, 0
    if layout == "verl":
        output = AgentLoopOutput(
            prompt_ids=prompt,
            response_ids=ids,
            response_mask=mask,
            response_logprobs=lps,
            metrics=AgentLoopMetrics(),
        )
        # verl keeps versions per sample (`extra_fields`); the audit's verl layout reads a per-token `versions`.
        fields = dict(output.model_dump(), index=index, versions=numeric(r.versions))
        if as_numpy:
            for key, dtype in (("prompt_ids", np.int64), ("response_ids", np.int64), ("response_mask", np.int64),
                               ("response_logprobs", np.float32), ("versions", np.int64)):
                fields[key] = np.asarray(fields[key], dtype=dtype)
        return fields, 0
    if layout == "areal-trajectory":
        p = len(prompt)
        columns = {
            "input_ids": (prompt + ids, np.int32),
            "loss_mask": ([0] * p + mask, np.int32),
            "logprobs": ([0.0] * p + lps, np.float32),
            "versions": ([-1] * p + numeric(r.versions), np.int32),
        }
        # AReaL's workflows return [1, L] tensors (`unsqueeze(0)`); the audit takes either shape.
        batched = rng is not None and rng.random() < 0.5
        sample = {"index": index}
        for key, (values, dtype) in columns.items():
            value = col(values, dtype)
            sample[key] = (value[None, :] if as_numpy else [value]) if batched else value
        return sample, p
    assert layout == "generic"
    return {
        "index": index,
        "prompt_ids": col(prompt, np.int64),
        "response_ids": col(ids, np.int64),
        "loss_mask": col(mask, bool),
        "logprobs": col(lps, np.float64),
        "versions": col(numeric(r.versions), np.int64),
    }, 0


def with_(values, p, value):
    return values[:p] + (value,) + values[p + 1 :]


# Each corruption: what it does to one trained position of a rollout, and the kind the audit must report there.
def drop_logprob(r, p, rng):
    return replace(r, logprobs=with_(r.logprobs, p, None)), "logprob-none"


def zero_logprob(r, p, rng):
    return replace(r, logprobs=with_(r.logprobs, p, 0.0)), "logprob-zero"


def other_logprob(r, p, rng):
    # A value no answer carries: drawn far below what the toy model samples at temperature 1.
    return replace(r, logprobs=with_(r.logprobs, p, -rng.uniform(40.0, 50.0))), "logprob-differs"


def shift_logprob(r, p, rng):
    # The logprob of the nearest other trained token whose value differs.
    others = [q for q in trained(r) if r.logprobs[q] != r.logprobs[p]]
    q = min(others, key=lambda q: (abs(q - p), q))
    return replace(r, logprobs=with_(r.logprobs, p, r.logprobs[q])), "logprob-shifted"


def unmask(r, p, rng):
    return replace(r, mask=with_(r.mask, p, 0)), "generated-untrained"


def change_token(r, p, rng):
    return replace(r, ids=with_(r.ids, p, r.ids[p] ^ 1)), "never-generated"


def relabel(r, p, rng):
    return replace(r, versions=with_(r.versions, p, str(int(VERSION) + 1))), "version-mismatch"


CORRUPTIONS = [drop_logprob, zero_logprob, other_logprob, shift_logprob, unmask, change_token, relabel]


def trained(r):
    return [i for i, m in enumerate(r.mask) if m]


def covering(report, kind, position):
    return [p for p in report.problems if p.kind == kind and p.start <= position < p.end]


def test_faithful_multi_turn_samples_pass_in_every_layout(sglang_mock):
    samples = []
    for seed in range(30):
        rng = random.Random(seed)
        r = rollout(sglang_mock, rng)
        samples.append(render(r, rng.choice(LAYOUTS), seed, rng=rng)[0])
    report = sglang_mock.assert_faithful(samples)
    assert report.samples == 30 and report.checked_logprobs == report.trained_tokens


@pytest.mark.parametrize("corruption", CORRUPTIONS, ids=lambda c: c.__name__)
def test_a_single_corruption_is_reported_where_it_is(sglang_mock, corruption):
    for seed in range(30):
        rng = random.Random(seed)
        r = rollout(sglang_mock, rng)
        # verl's pydantic `AgentLoopOutput` refuses a None logprob itself: that corruption cannot reach its layout.
        layout = rng.choice([l for l in LAYOUTS if not (corruption is drop_logprob and l == "verl")])
        candidates = [p for p in trained(r) if r.logprobs[p] != 0.0]
        if corruption is shift_logprob:
            candidates = [p for p in candidates if any(r.logprobs[q] != r.logprobs[p] for q in trained(r))]
        if not candidates:
            continue
        p = rng.choice(candidates)
        bad, kind = corruption(r, p, rng)
        sample, offset = render(bad, layout, seed, rng=rng)
        report = sglang_mock.audit([sample])
        where = f"seed {seed}, layout {layout}: {corruption.__name__} at response[{p}] ({kind} at {offset + p})"
        found = covering(report, kind, offset + p)
        assert found and set(report.kinds()) == {kind}, f"{where}:\n{report}"
        if corruption is change_token:
            # The context of every later token changed with it: never generated from there on.
            assert found[0].start == offset + p, f"{where}:\n{report}"
        else:
            assert (found[0].start, found[0].end) == (offset + p, offset + p + 1), f"{where}:\n{report}"


def test_samples_as_numpy_arrays_pass_and_corruptions_show(sglang_mock):
    for seed in range(30):
        rng = random.Random(1000 + seed)
        r = rollout(sglang_mock, rng)
        layout = LAYOUTS[seed % len(LAYOUTS)]
        sample, offset = render(r, layout, seed, as_numpy=True, rng=rng)
        sglang_mock.assert_faithful([sample])
        p = rng.choice([p for p in trained(r) if r.logprobs[p] != 0.0])
        bad, kind = zero_logprob(r, p, rng)
        report = sglang_mock.audit([render(bad, layout, seed, as_numpy=True, rng=rng)[0]])
        assert covering(report, kind, offset + p), f"seed {seed}, layout {layout}:\n{report}"


def test_an_empty_audit_fails(sglang_mock):
    report = sglang_mock.audit([])
    assert not report.ok and report.samples == 0 and report.kinds() == ["nothing-audited"]


def test_a_malformed_sample_is_refused_naming_the_sample_and_field(sglang_mock):
    good = {"prompt_ids": [1, 2], "response_ids": [3], "loss_mask": [0], "logprobs": [0.0]}
    bad = {"prompt_ids": [1, 2], "response_ids": [3, 4], "loss_mask": [1, 2], "logprobs": [-1.0, -1.0]}
    with pytest.raises(ValueError, match=r"samples\[1\]\.loss_mask\[1\]: expected 0 or 1 .*got 2"):
        sglang_mock.audit([good, bad])
