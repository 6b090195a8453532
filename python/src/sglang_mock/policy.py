"""The trainer's side of the toy policy: its weights, its per-token logprobs and their exact gradient.

``sglang-mock`` serves a toy language model with weights (``mock-server/MODEL.md`` section 14): one tensor,
``logit_offsets``, of ``num_buckets`` rows and nine columns. This module computes, from a weights directory and
token ids alone, what the server computes: the logprob of every token of a sequence at a temperature, as the
binary32 value the server reports, and the gradient of any weighted sum of those logprobs with respect to the
weights. A trainer that recomputes its rollouts' logprobs through it gets importance ratios of exactly 1 at the
rollout policy; one that forgets the temperature, shifts a position or drops a token gets something else.

numpy is the only requirement (``pip install sglang-mock[policy]``)::

    from sglang_mock.policy import Policy, ToyPolicy
    policy = Policy.load("ckpt/step-0")             # a directory with config.json and model.safetensors
    model = ToyPolicy(policy, seed=0)                # the server's --seed and --vocab-size
    lp = model.logprobs(prompt + output, start=len(prompt), temperature=0.8)   # float32, one per output token
    lp, grad = model.logprobs_and_grad(prompt + output, len(prompt), 0.8, coefficients=advantages)
    Policy(policy.offsets - 0.1 * grad).save("ckpt/step-1")   # then POST /update_weights_from_disk

The model is that of the toy tokenizer (``--tokenizer`` unset): special ids ``V-3 .. V-1``, word pieces from id
256. Logarithms and exponentials go through Python's ``math`` module (the C library's, as MODEL.md's notation
says), and sums run in the order the document fixes, so the values are the server's to the bit.
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Dict, Iterable, Optional, Sequence, Tuple

import numpy as np

__all__ = ["ARCHITECTURE", "Policy", "ToyPolicy", "TENSOR_NAME"]

ARCHITECTURE = "SglangMockPolicyForCausalLM"
TENSOR_NAME = "logit_offsets"
SLOTS = 9
OFFSET_MIN, OFFSET_MAX = -2.0, 16.0
TAIL_LOGIT = -12.0
TAIL_WEIGHT = math.exp(TAIL_LOGIT)
DEFAULT_VOCAB_SIZE = 151_936
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_NO_TOKEN = np.uint64(0x1FFFFF)
_PUNCTUATION = np.array([46, 44, 46, 44, 10, 33, 63, 58, 59], dtype=np.uint32)
_FIRST_WORD = 256
_U = np.uint64
# Section 4.2's end-of-turn weight after t tokens of a turn, t = 0 .. 220.
_END_OF_TURN = np.array([math.exp(min(-6 + 0.05 * t, 5)) for t in range(221)])
_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


class Policy:
    """The weights: ``offsets``, a float32 array of shape ``[num_buckets, 9]``."""

    def __init__(self, offsets):
        offsets = np.array(offsets, dtype=np.float32)
        if offsets.ndim != 2 or offsets.shape[1] != SLOTS or offsets.shape[0] < 1:
            raise ValueError(f"logit_offsets must have shape [num_buckets, 9], got {list(offsets.shape)}")
        if not np.all(np.isfinite(offsets)):
            raise ValueError("every offset must be finite")
        self.offsets = offsets

    @classmethod
    def zero(cls, num_buckets: int = 8) -> "Policy":
        """The all-zero policy: the base model of MODEL.md sections 4 to 9."""
        return cls(np.zeros((num_buckets, SLOTS), dtype=np.float32))

    @property
    def num_buckets(self) -> int:
        return int(self.offsets.shape[0])

    @classmethod
    def load(cls, path: str) -> "Policy":
        """The weights of a toy policy directory (MODEL.md section 14.4)."""
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        if ARCHITECTURE not in (config.get("architectures") or []):
            raise ValueError(f"{path}/config.json names no {ARCHITECTURE}")
        buckets = int(config.get("num_buckets", 8))
        offsets = np.zeros((buckets, SLOTS), dtype=np.float32)
        files = sorted(name for name in os.listdir(path) if name.endswith(".safetensors"))
        if not files:
            raise FileNotFoundError(f"Cannot find any model weights with `{path}`")
        for name in files:
            for tensor, values in read_safetensors(os.path.join(path, name)).items():
                if tensor != TENSOR_NAME:
                    raise ValueError(f"{name}: the toy policy has no parameter {tensor!r}")
                if values.shape != (buckets, SLOTS):
                    raise ValueError(f"{name}: {TENSOR_NAME} has shape {list(values.shape)}, want [{buckets}, 9]")
                offsets = values.astype(np.float32)
        return cls(offsets)

    def save(self, path: str, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        """Writes ``config.json`` and ``model.safetensors``, the directory ``/update_weights_from_disk`` loads.
        The weights file is written beside and renamed, so a server never reads half of it."""
        os.makedirs(path, exist_ok=True)
        config = {
            "architectures": [ARCHITECTURE],
            "model_type": "sglang_mock_policy",
            "num_buckets": self.num_buckets,
            "vocab_size": int(vocab_size),
            "torch_dtype": "float32",
        }
        with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
        tmp = os.path.join(path, ".model.safetensors.tmp")
        with open(tmp, "wb") as f:
            f.write(safetensors_bytes({TENSOR_NAME: self.offsets}))
        os.replace(tmp, os.path.join(path, "model.safetensors"))

    def __eq__(self, other) -> bool:
        return isinstance(other, Policy) and np.array_equal(self.offsets, other.offsets)

    def __repr__(self) -> str:
        return f"Policy(num_buckets={self.num_buckets}, max |offset|={float(np.abs(self.offsets).max()):.4g})"


def read_safetensors(path: str) -> Dict[str, np.ndarray]:
    """The tensors of a safetensors file: an 8-byte little-endian header length, a JSON header, the data."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + length])
    body = memoryview(data)[8 + length:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        start, end = info["data_offsets"]
        if dtype == "BF16":
            raw = np.frombuffer(body[start:end], dtype="<u2").astype(np.uint32) << 16
            values = raw.view(np.float32)
        elif dtype in _DTYPES:
            values = np.frombuffer(body[start:end], dtype=_DTYPES[dtype])
        else:
            raise ValueError(f"{name}: {TENSOR_NAME} must be a floating-point tensor, got {dtype}")
        tensors[name] = values.reshape(info["shape"])
    return tensors


def safetensors_bytes(tensors: Dict[str, np.ndarray]) -> bytes:
    """A safetensors file of float32 tensors, as ``safetensors.numpy.save`` writes one."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        raw = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the header is padded to 8 bytes, as the format recommends
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    z = z + _GOLDEN
    z = (z ^ (z >> _U(30))) * _U(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U(27))) * _U(0x94D049BB133111EB)
    return z ^ (z >> _U(31))


def _golden_times(i: int) -> np.uint64:
    """``i * GOLDEN`` modulo 2^64 (numpy warns when a product of scalars wraps; one of arrays wraps silently)."""
    return _U((i * 0x9E3779B97F4A7C15) % (1 << 64))


def _unit(h: np.ndarray) -> np.ndarray:
    return (h >> _U(11)).astype(np.float64) * (1.0 / (1 << 53))


def _exp(x: np.ndarray) -> np.ndarray:
    return np.array(list(map(math.exp, x.ravel().tolist())), dtype=np.float64).reshape(x.shape)


def _log(x: np.ndarray) -> np.ndarray:
    return np.array(list(map(math.log, x.ravel().tolist())), dtype=np.float64).reshape(x.shape)


class ToyPolicy:
    """The toy model under a policy: MODEL.md sections 3, 4, 5 and 14 over token ids.

    ``seed`` and ``vocab_size`` are the server's ``--seed`` and ``--vocab-size``."""

    def __init__(self, policy: Optional[Policy] = None, seed: int = 0, vocab_size: int = DEFAULT_VOCAB_SIZE):
        self.policy = policy if policy is not None else Policy.zero()
        self.seed = int(seed)
        self.vocab_size = int(vocab_size)
        if not 1024 <= self.vocab_size <= 1_400_000:
            raise ValueError(f"vocab_size must be between 1024 and 1400000, got {vocab_size}")

    # -- Sections 4.1 to 4.3 and 14.2, vectorised over the positions of one sequence -------------------------

    def _explicit(self, tokens: np.ndarray, start: int):
        """For the contexts ``tokens[:i]``, ``i = start .. len(tokens) - 1``: the nine slot ids, their weights
        after the policy's offsets (section 14.2), and the bucket."""
        ids, weights, buckets = self.base(tokens, np.arange(start, len(tokens), dtype=np.int64))
        offsets = self.policy.offsets.astype(np.float64)
        factors = _exp(np.clip(offsets, OFFSET_MIN, OFFSET_MAX))
        moved = np.any(offsets != 0, axis=1)[buckets]
        weights[moved] = weights[moved] * factors[buckets[moved]]
        return ids, weights, buckets

    def base(self, tokens: np.ndarray, ends: np.ndarray):
        """For the contexts ``tokens[:end]`` (every ``end`` at least 1): the nine slot ids, the base model's
        weights (sections 4.1 to 4.3) and the context's bucket under this policy's ``num_buckets``."""
        tokens = np.asarray(tokens, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        toks = tokens.astype(np.uint64)

        def back(k):
            at = ends - k
            out = np.full(len(ends), _NO_TOKEN, dtype=np.uint64)
            ok = at >= 0
            out[ok] = toks[at[ok]]
            return out

        key = back(1) | (back(2) << _U(21)) | (back(3) << _U(42))
        h = _splitmix64(_splitmix64(_U(self.seed) ^ key) ^ ends.astype(np.uint64))
        draws = [_splitmix64(h + _golden_times(i)) for i in range(1, 7)]
        shape = draws[0]
        flatness = 0.26 + 0.69 * _unit(shape)
        weights = np.empty((len(ends), SLOTS))
        weight = 50 + 40 * ((shape & _U(0x7FF)).astype(np.float64) / 2048)
        for k in range(8):
            weights[:, k] = weight
            if k < 7:
                jitter = ((draws[1 + k // 3] >> _U(21 * (k % 3))) & _U(0x1FFFFF)).astype(np.float64) / 2**21
                weight = weight * (flatness * (0.55 + 0.45 * jitter))
        weights[:, 8] = _END_OF_TURN[np.minimum(self._turn_lengths(tokens, ends), 220)]
        layout, stream = draws[4], draws[5]
        ids = self._slot_ids(layout, stream)
        buckets = (layout % _U(self.policy.num_buckets)).astype(np.int64)
        return ids, weights, buckets

    def _turn_lengths(self, tokens: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Section 4.2's t for each context ``tokens[:end]``: ids after the last special id, 0 without one."""
        special = tokens >= self.vocab_size - 3
        positions = np.arange(len(tokens))
        last = np.maximum.accumulate(np.where(special, positions, -1))
        before = np.where(ends > 0, last[np.maximum(ends - 1, 0)], -1)
        return np.where(before >= 0, ends - 1 - before, 0)

    def _slot_ids(self, layout: np.ndarray, stream: np.ndarray) -> np.ndarray:
        rotation = (layout & _U(7)).astype(np.int64)
        punctuation_pos = (layout >> _U(3)) % _U(10)
        punctuation = _PUNCTUATION[((layout >> _U(8)) % _U(9)).astype(np.int64)]
        block = ((self.vocab_size - 259) // 8) & ~1
        ids = np.empty((len(layout), SLOTS), dtype=np.int64)
        for k in range(8):
            r = _splitmix64(stream + _golden_times(k + 1)) >> _U(32)
            start = ((k + rotation) % 8) * block
            pair = ((r * _U(block // 2)) >> _U(32)).astype(np.int64)
            word = _FIRST_WORD + start + 2 * pair + ((r & _U(7)) == 0)
            ids[:, k] = np.where(punctuation_pos == k, punctuation, word)
        ids[:, 8] = self.vocab_size - 1
        return ids

    # -- Sections 5 and 14.3 ----------------------------------------------------------------------------------

    def _logprobs(self, tokens, start: int, temperature: float):
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or not 1 <= start <= len(tokens):
            raise ValueError(f"start must be between 1 and len(tokens), got {start} for {len(tokens)} tokens")
        if len(tokens) and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(f"every token id must be in 0..{self.vocab_size}")
        if not temperature > 0:
            raise ValueError(f"the temperature must be positive, got {temperature}")
        temperature = float(temperature)
        ids, weights, buckets = self._explicit(tokens, start)
        rows = len(weights)
        # Section 5's order: descending weight, ties by ascending id; the normaliser sums in that order.
        order = np.lexsort((ids, -weights), axis=1) if rows else np.empty((0, SLOTS), dtype=np.int64)
        tail_count = self.vocab_size - SLOTS
        if temperature == 1.0:
            values = np.take_along_axis(weights, order, axis=1)
            z = _sum_in_order(values) + tail_count * TAIL_WEIGHT
            slot_lp = _log(weights / z[:, None])
            tail_lp = _log(TAIL_WEIGHT / z)
        else:
            inverse = 1 / temperature
            logits = _log(weights) * inverse
            tail_logit = TAIL_LOGIT * inverse
            shift = np.take_along_axis(logits, order[:, :1], axis=1)[:, 0]
            values = _exp(np.take_along_axis(logits, order, axis=1) - shift[:, None])
            z = _sum_in_order(values) + tail_count * _exp(tail_logit - shift)
            log_z = shift + _log(z)
            slot_lp = logits - log_z[:, None]
            tail_lp = tail_logit - log_z
        targets = tokens[start:]
        hits = ids == targets[:, None]
        slot = np.where(hits.any(axis=1), hits.argmax(axis=1), -1)
        lp = np.where(slot >= 0, slot_lp[np.arange(rows), np.maximum(slot, 0)], tail_lp)
        return lp, slot, slot_lp, buckets, temperature

    def logprobs(self, tokens: Sequence[int], start: int, temperature: float = 1.0) -> np.ndarray:
        """``log p(tokens[i] | tokens[:i])`` for ``i = start .. len(tokens) - 1`` at ``temperature``, as the
        float32 values the server reports in ``output_token_logprobs`` (for ``start = len(prompt)``) and
        ``input_token_logprobs``."""
        return self._logprobs(tokens, start, temperature)[0].astype(np.float32)

    def logprobs_and_grad(
        self,
        tokens: Sequence[int],
        start: int,
        temperature: float = 1.0,
        coefficients: Optional[Iterable[float]] = None,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """The logprobs of :meth:`logprobs` and the gradient of ``sum_i coefficients[i] * logprob_i`` with respect
        to the offsets (MODEL.md section 14.3), an array of the policy's shape. ``coefficients`` default to 1
        (the gradient of the sequence's log-likelihood); a policy-gradient loss passes its per-token weights."""
        lp, slot, slot_lp, buckets, temperature = self._logprobs(tokens, start, temperature)
        c = np.ones(len(lp)) if coefficients is None else np.asarray(list(coefficients), dtype=np.float64)
        if c.shape != lp.shape:
            raise ValueError(f"{len(c)} coefficients for {len(lp)} logprobs")
        per_slot = -np.exp(slot_lp)
        rows = np.arange(len(lp))
        hit = slot >= 0
        per_slot[rows[hit], slot[hit]] += 1.0
        per_slot *= (c / temperature)[:, None]
        offsets = self.policy.offsets.astype(np.float64)
        active = (offsets >= OFFSET_MIN) & (offsets <= OFFSET_MAX)
        grad = np.zeros_like(offsets)
        np.add.at(grad, buckets, per_slot)
        return lp.astype(np.float32), grad * active


def _sum_in_order(values: np.ndarray) -> np.ndarray:
    """Row sums left to right (numpy's own reductions sum pairwise, in another order)."""
    total = values[:, 0].copy()
    for k in range(1, values.shape[1]):
        total += values[:, k]
    return total
