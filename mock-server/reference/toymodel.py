"""Reference implementation of the toy language model of `sglang-mock`.

This module implements sections 2 to 9, 12, 13 and 14 of `mock-server/MODEL.md` (tokenizer, hashing, the
distribution at one context, temperature and logprobs, the sorted order and filters, sampling, request handling,
generation and finish checks, the router, the model over a loaded tokenizer's vocabulary, and the policy's weights). It was written from that document
alone, in Python 3.11, and is independent of the Rust server's code: the tests compare the server against it. The
toy model needs the standard library only; a loaded tokenizer (section 13) is read with Hugging Face's `tokenizers`
package, imported only then.

Use it from Python:

    from toymodel import ToyModel
    model = ToyModel(seed=0)                    # or ToyModel(seed=0, tokenizer="path/to/model-dir")
    samples = model.generate({"text": "Hello world", "sampling_params": {"temperature": 0.7}})
    dist = model.distribution(model.encode("Hello world"), 0.7)
    dist.logprob(110106), dist.top(5), dist.filtered(top_k=None, top_p=0.9, min_p=0.0)

or from the command line (prints the list of samples as JSON; the body is read from stdin when it is `-` or absent):

    python3 toymodel.py [--seed S] [--vocab-size V] [--tokenizer PATH] [--context-length L]
                        [--sglang-version X.Y.Z] [--stream-interval K] [--return-original-logprob]
                        [--script FILE] [--model-path DIR] [BODY_JSON | -]

Logprobs are returned at full binary64 precision (the server rounds them to binary32 on the wire); `-inf` is
returned as `None`. A streamed body (`"stream": true`) is answered with its final text, which over a loaded
tokenizer depends on the stream's chunk schedule (section 13.4).
"""

import argparse
import base64
import codecs
import json
import math
import os
import re
import struct
import sys
from collections import namedtuple
from types import SimpleNamespace

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15

CONSONANTS = "bcdfghjklmnprstvwz"
VOWELS = "aeiou"
_CONSONANT_INDEX = {ord(c): i for i, c in enumerate(CONSONANTS)}
_VOWEL_INDEX = {ord(c): i for i, c in enumerate(VOWELS)}
SPECIAL_NAMES = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids V-3, V-2, V-1 (section 2.1)
_SPECIAL_BYTES = tuple(name.encode("ascii") for name in SPECIAL_NAMES)
FIRST_WORD_ID = 256
WORD_OFFSETS = (0, 90, 90 + 8100)  # u of the first word piece with one, two, three syllables (section 2.1)

NO_TOKEN = 0x1FFFFF  # back(k) when the context is shorter than k (section 4.1)
PUNCTUATION = (46, 44, 46, 44, 10, 33, 63, 58, 59)  # section 4.3
TAIL_LOGIT = -12
TAIL_WEIGHT = math.exp(TAIL_LOGIT)  # section 4
GREEDY_BELOW = 1e-6  # section 8.2
PROMPT_HASH_START = 0x50524F4D5054  # section 8.3
SEED_SALT = 0x53454544  # section 8.3
NO_SEED = 0xFFFFFFFFFFFFFFFF  # section 8.3
DRAW_SALT = 0x44524157  # section 8.3
DETERMINISTIC_SEED = 42  # section 8.3, with --enable-deterministic-inference
# The first SGLang release of each behaviour that changes the model's answer (the server's list of releases is
# `sglang-mock releases`; a release is any `X.Y.Z`, and a later one behaves as the newest rule says).
PROMPT_END_LOGPROB_START_SINCE = (0, 5, 15)  # logprob_start_len -1 is len(prompt), section 8.5
SEED_MAY_BE_NULL_SINCE = (0, 5, 15)  # 0.5.3 refuses an explicit null sampling_seed, section 8.3
SEED_GATED_SINCE = (0, 5, 23)  # only an integer in i64 is a sampling_seed, section 8.3
ROUTED_EXPERTS_SINCE = (0, 5, 15)  # section 12
SAMPLING_MASKS_SINCE = (0, 5, 23)  # section 7.1
TEXT_BEFORE_STOP_ID_SINCE = (0, 5, 15)  # section 9 step 6: stop strings are checked before stop ids
LENGTH_LAST_SINCE = (0, 5, 23)  # section 9 step 6: the length is checked last
STOP_REGEX_SINCE = (0, 5, 15)  # section 8.2: stop_regex
UNMEASURED = 2 ** 30  # section 8.2: the measure of what a pattern's measure does not count


def _release(number):
    """A release number `X.Y.Z` as a tuple of integers."""
    parts = str(number).strip().lstrip("vV").split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise ValueError(f"sglang_version must be a release number X.Y.Z, got {number!r}")
    return tuple(int(part) for part in parts)


# ---------------------------------------------------------------------------------------------------------------
# Section 3: hashing
# ---------------------------------------------------------------------------------------------------------------

def splitmix64(z):
    """SplitMix64's output function on unsigned 64-bit integers (section 3); `z` may be any int, taken mod 2^64."""
    z = (z + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def mix(state, value):
    """`splitmix64(state ^ splitmix64(value))` (section 3)."""
    return splitmix64((state & MASK64) ^ splitmix64(value))


def unit(h):
    """The real number `(h >> 11) * 2^-53` in [0, 1) (section 3)."""
    return (h >> 11) * 2.0 ** -53


def _floor_capped(q, cap):
    """`min(floor(q), cap)` for a non-negative real `q`, without overflowing when `q` is huge or infinite."""
    return cap if q >= cap else math.floor(q)


# ---------------------------------------------------------------------------------------------------------------
# Section 4: the explicit entries at one context
# ---------------------------------------------------------------------------------------------------------------

WordSlot = namedtuple("WordSlot", "r start pair id")
WordSlot.__doc__ = "A word slot of section 4.3: its 32-bit draw `r`, `start`, `pair` and the resulting id."


class ExplicitEntries:
    """The nine explicit entries of a context (sections 4.1 to 4.3), keeping every intermediate value.

    Attributes: `key`, `hash` (h) and `draws` (draw_1 .. draw_6 at indexes 0 .. 5) of 4.1; `flatness`, `jitters`,
    `ratios` (k = 0 .. 6), `turn_length` (t) and `weights` (w[0] .. w[8]) of 4.2; `rotation`, `punctuation_pos`,
    `punctuation`, `block`, `word_slots` (a WordSlot per slot 0 .. 7, None for the punctuation slot) and `ids`
    (slots 0 .. 8) of 4.3; `entries`, the (id, weight) pairs in slot order.
    """

    @staticmethod
    def context_key(context):
        """Section 4.1's key: the last three ids packed into one word."""
        n = len(context)
        back = [context[n - k] if n >= k else NO_TOKEN for k in (1, 2, 3)]
        return back[0] | (back[1] << 21) | (back[2] << 42)

    @staticmethod
    def context_hash(seed, context):
        """Section 4.1's h."""
        return splitmix64(splitmix64(seed ^ ExplicitEntries.context_key(context)) ^ len(context))

    def __init__(self, seed, vocab, context, policy=None):
        """`vocab`: the vocabulary (a ToyVocabulary or a LoadedVocabulary) whose ids the slots take; `policy`: the
        weights of section 14 (a Policy), None for all zero."""
        self.key = self.context_key(context)
        self.hash = self.context_hash(seed, context)
        self.draws = [splitmix64(self.hash + i * GOLDEN) for i in range(1, 7)]
        self._weights(vocab, context)
        self._ids(vocab)
        self.bucket = None
        if policy is not None:
            self.bucket = self.draws[4] % policy.buckets
            row = policy.offsets[self.bucket]
            if any(theta != 0 for theta in row):
                self.weights = [w * math.exp(min(max(theta, OFFSET_MIN), OFFSET_MAX))
                                for w, theta in zip(self.weights, row)]
        self.entries = list(zip(self.ids, self.weights))

    def _weights(self, vocab, context):
        """Section 4.2: the falling candidate weights and the end-of-turn weight."""
        shape = self.draws[0]
        self.flatness = 0.26 + 0.69 * unit(shape)
        self.jitters = []
        self.ratios = []
        self.weights = [50 + 40 * ((shape & 0x7FF) / 2048)]
        for k in range(7):
            jitter = ((self.draws[1 + k // 3] >> (21 * (k % 3))) & 0x1FFFFF) / 2 ** 21
            ratio = self.flatness * (0.55 + 0.45 * jitter)
            self.jitters.append(jitter)
            self.ratios.append(ratio)
            self.weights.append(self.weights[k] * ratio)
        t = 0
        while t < len(context) and not vocab.is_special(context[len(context) - 1 - t]):
            t += 1
        if t == len(context):
            # No special id: plain text, in no turn.
            t = 0
        self.turn_length = t
        self.weights.append(math.exp(min(-6 + 0.05 * t, 5)))

    def _ids(self, vocab):
        """Section 4.3 (13.2 over a loaded vocabulary): the id of each slot."""
        layout, stream = self.draws[4], self.draws[5]
        self.rotation = layout & 7
        self.punctuation_pos = (layout >> 3) % 10
        self.punctuation = vocab.punctuation_ids[(layout >> 8) % 9]
        self.block = (vocab.word_count // 8) & ~1
        self.word_slots = []
        self.ids = []
        for k in range(8):
            if k == self.punctuation_pos:
                self.word_slots.append(None)
                self.ids.append(self.punctuation)
                continue
            r = splitmix64(stream + (k + 1) * GOLDEN) >> 32
            start = ((k + self.rotation) % 8) * self.block
            pair = (r * (self.block // 2)) >> 32
            token = vocab.word_id(start + 2 * pair + (1 if r & 7 == 0 else 0))
            self.word_slots.append(WordSlot(r, start, pair, token))
            self.ids.append(token)
        self.ids.append(vocab.end_of_turn)


# ---------------------------------------------------------------------------------------------------------------
# Section 14: the policy's weights
# ---------------------------------------------------------------------------------------------------------------

OFFSET_MIN, OFFSET_MAX = -2.0, 16.0  # section 14.1
POLICY_ARCHITECTURE = "SglangMockPolicyForCausalLM"  # section 14.4
_SAFETENSORS_FLOATS = {"F32": ("<f", 4), "F64": ("<d", 8)}


class Policy:
    """Section 14.1: `offsets[bucket][slot]`, `buckets` rows of nine binary32 values each (held as Python floats,
    which hold every binary32 value exactly)."""

    def __init__(self, offsets):
        self.offsets = [[float(v) for v in row] for row in offsets]
        self.buckets = len(self.offsets)
        if self.buckets == 0 or any(len(row) != 9 for row in self.offsets):
            raise ValueError("a policy has at least one row of nine offsets")
        if not all(math.isfinite(v) for row in self.offsets for v in row):
            raise ValueError("every offset must be finite")

    @staticmethod
    def load(path):
        """Section 14.4: the policy of a model directory, or None when its config.json names no toy policy. The
        safetensors files are read here with the standard library: an 8-byte little-endian header length, the
        JSON header, the data."""
        try:
            config = _read_json(os.path.join(path, "config.json"))
        except (OSError, ValueError):
            return None
        if POLICY_ARCHITECTURE not in (config.get("architectures") or []):
            return None
        buckets = config.get("num_buckets", 8)
        rows = [[0.0] * 9 for _ in range(buckets)]
        for name in sorted(os.listdir(path)):
            if not name.endswith(".safetensors"):
                continue
            with open(os.path.join(path, name), "rb") as f:
                data = f.read()
            (length,) = struct.unpack_from("<Q", data, 0)
            header = json.loads(data[8:8 + length])
            body = data[8 + length:]
            for tensor, info in header.items():
                if tensor == "__metadata__":
                    continue
                if tensor != "logit_offsets" or info["shape"] != [buckets, 9]:
                    raise ValueError(f"{name}: unexpected tensor {tensor} {info['shape']}")
                fmt, size = _SAFETENSORS_FLOATS[info["dtype"]]
                start, end = info["data_offsets"]
                values = [struct.unpack_from(fmt, body, start + i * size)[0] for i in range((end - start) // size)]
                # A binary64 value is rounded to binary32 as it is loaded (section 14.4).
                values = [struct.unpack("<f", struct.pack("<f", v))[0] for v in values]
                rows = [values[b * 9:(b + 1) * 9] for b in range(buckets)]
        return Policy(rows)


# ---------------------------------------------------------------------------------------------------------------
# Sections 4.4 to 7: masks, temperature, logprobs, the sorted order, filters and sampling
# ---------------------------------------------------------------------------------------------------------------

class Distribution:
    """The distribution at one context, temperature and mask (sections 4.4, 5, 6 and 7).

    Attributes: `ids` (the unmasked explicit entries in the order of section 5), `weights` (their v at T),
    `tail_count`, `tail_weight` (v_tail), `normaliser` (Z), `logprobs` (of `ids`) and `tail_logprob`; away from
    T == 1 also `logits` (x_e), `tail_logit`, `shift` and `log_normaliser` (log Z), which are None at T == 1.
    """

    def __init__(self, vocab_size, explicit, temperature, masked=()):
        """`explicit`: the (id, weight) pairs of section 4; `masked`: ids given probability zero (section 4.4)."""
        if not temperature > 0:
            raise ValueError("the temperature must be positive")
        self.vocab_size = vocab_size
        self.masked = frozenset(token for token in masked if 0 <= token < vocab_size)
        unmasked = sorted(((token, w) for token, w in explicit if token not in self.masked),
                          key=lambda entry: (-entry[1], entry[0]))
        self.ids = [token for token, _ in unmasked]
        self._index = {token: i for i, token in enumerate(self.ids)}
        self.tail_count = vocab_size - len(self.ids) - len(self.masked)
        if not self.ids and self.tail_count == 0:
            raise ValueError("every id is masked")
        self._excluded = sorted(self.masked.union(self.ids))
        if temperature == 1:
            self.logits = self.tail_logit = self.shift = self.log_normaliser = None
            self.weights = [w for _, w in unmasked]
            self.tail_weight = TAIL_WEIGHT
            self.normaliser = self._sum_weights(len(self.weights)) + self.tail_count * self.tail_weight
            self.logprobs = [math.log(w / self.normaliser) for w in self.weights]
            self.tail_logprob = math.log(TAIL_WEIGHT / self.normaliser)
        else:
            inverse = 1 / temperature
            self.logits = [math.log(w) * inverse for _, w in unmasked]
            self.tail_logit = TAIL_LOGIT * inverse
            self.shift = self.logits[0] if self.logits else self.tail_logit
            self.weights = [math.exp(x - self.shift) for x in self.logits]
            self.tail_weight = math.exp(self.tail_logit - self.shift)
            self.normaliser = self._sum_weights(len(self.weights)) + self.tail_count * self.tail_weight
            self.log_normaliser = self.shift + math.log(self.normaliser)
            self.logprobs = [x - self.log_normaliser for x in self.logits]
            self.tail_logprob = self.tail_logit - self.log_normaliser

    def _sum_weights(self, count):
        """The weights of the first `count` explicit entries summed left to right in the order (sections 5, 7)."""
        total = 0.0
        for v in self.weights[:count]:
            total += v
        return total

    @property
    def size(self):
        """N: the number of unmasked ids, explicit and tail (section 6)."""
        return len(self.ids) + self.tail_count

    def logprob(self, token_id):
        """The logprob of one id (section 5); -inf for a masked id or one outside 0..V."""
        if not 0 <= token_id < self.vocab_size or token_id in self.masked:
            return -math.inf
        index = self._index.get(token_id)
        return self.tail_logprob if index is None else self.logprobs[index]

    def tail_id(self, rank):
        """The rank-th tail id (section 6): the rank-th smallest id that is neither explicit nor masked."""
        token = rank
        for excluded in self._excluded:
            if excluded > token:
                break
            token += 1
        return token

    def _tail_ids(self):
        """The tail ids in ascending order (section 6)."""
        excluded = iter(self._excluded)
        next_excluded = next(excluded, None)
        for token in range(self.vocab_size):
            if token == next_excluded:
                next_excluded = next(excluded, None)
            else:
                yield token

    def top(self, k):
        """The top-k list of section 6: the first min(k, N) ids of the sorted order as (id, logprob) pairs."""
        count = max(0, min(k, self.size))
        result = list(zip(self.ids, self.logprobs))[:count]
        for token in self._tail_ids():
            if len(result) >= count:
                break
            result.append((token, self.tail_logprob))
        return result

    def _keep_top_p(self, top_p):
        """keep_p of section 6."""
        before = 0.0
        count = 0
        for v in self.weights:
            if before > top_p:
                return count
            count += 1
            before += v / self.normaliser
        tail_probability = self.tail_weight / self.normaliser
        if before <= top_p and tail_probability > 0 and self.tail_count > 0:
            count += _floor_capped((top_p - before) / tail_probability, self.tail_count - 1) + 1
        return count

    def _keep_min_p(self, min_p):
        """keep_min_p of section 6."""
        first = self.weights[0] if self.weights else self.tail_weight
        threshold = min_p * first
        count = 0
        for v in self.weights:
            if not v >= threshold:
                return count
            count += 1
        if self.tail_weight >= threshold:
            count += self.tail_count
        return count

    def kept(self, top_k, top_p, min_p):
        """The size of the kept prefix of the sorted order (section 6); `top_k` None (or -1) means no top-k."""
        size = self.size
        keep_k = size if top_k is None or top_k == -1 else min(top_k, size)
        keep_p = self._keep_top_p(top_p) if top_p < 1 else size
        keep_min_p = self._keep_min_p(min_p) if min_p > 0 else size
        return max(1, min(keep_k, keep_p, keep_min_p))

    def _kept_prefix(self, top_k, top_p, min_p):
        """(kept_explicit, kept_tail, total) of section 7."""
        kept = self.kept(top_k, top_p, min_p)
        kept_explicit = min(kept, len(self.ids))
        kept_tail = kept - kept_explicit
        if kept == self.size:
            total = self.normaliser
        else:
            total = self._sum_weights(kept_explicit) + kept_tail * self.tail_weight
        return kept_explicit, kept_tail, total

    def sample(self, top_k, top_p, min_p, u):
        """Section 7: the id drawn with the uniform number `u` in [0, 1) from the kept prefix."""
        kept_explicit, kept_tail, total = self._kept_prefix(top_k, top_p, min_p)
        target = u * total
        for token, v in zip(self.ids[:kept_explicit], self.weights):
            if target < v:
                return token
            target = target - v
        if kept_tail == 0 or self.tail_weight == 0:
            return self.ids[kept_explicit - 1]
        return self.tail_id(_floor_capped(target / self.tail_weight, kept_tail - 1))

    def support(self, top_k, top_p, min_p, chosen):
        """Section 7.1: the kept ids of positive weight with their renormalised logprobs, and `chosen`'s (-inf
        when it is not among them)."""
        kept_explicit, kept_tail, total = self._kept_prefix(top_k, top_p, min_p)

        def renormalised(v, x):
            return math.log(v / total) if self.logits is None else x - (self.shift + math.log(total))

        ids, logprobs = [], []
        for i in range(kept_explicit):
            if not self.weights[i] > 0:
                break
            ids.append(self.ids[i])
            logprobs.append(renormalised(self.weights[i], self.logits and self.logits[i]))
        if self.tail_weight > 0:
            tail = renormalised(self.tail_weight, self.tail_logit)
            for rank in range(kept_tail):
                ids.append(self.tail_id(rank))
                logprobs.append(tail)
        selected = dict(zip(ids, logprobs)).get(chosen, -math.inf)
        return ids, logprobs, selected

    def kept_prefix(self, top_k, top_p, min_p):
        """Section 7.2: the kept prefix of the sorted order (zero weights included) and the renormalised logprob
        of an id under it, as a function (-inf outside the prefix)."""
        kept_explicit, kept_tail, total = self._kept_prefix(top_k, top_p, min_p)
        log_total = math.log(total) if self.logits is None else self.shift + math.log(total)
        tail_ids = []
        for token in self._tail_ids():
            if len(tail_ids) >= kept_tail:
                break
            tail_ids.append(token)
        explicit = {}
        for i in range(kept_explicit):
            explicit[self.ids[i]] = (math.log(self.weights[i] / total) if self.logits is None
                                     else self.logits[i] - log_total)
        tail = math.log(self.tail_weight / total) if self.logits is None else self.tail_logit - log_total
        kept_tail_ids = frozenset(tail_ids)

        def renormalised(token):
            if token in explicit:
                return explicit[token]
            return tail if token in kept_tail_ids else -math.inf

        return list(explicit) + tail_ids, renormalised

    def filtered(self, top_k, top_p, min_p):
        """The renormalised distribution that section 7 draws from.

        Returns (kept explicit entries as (id, probability), number of kept tail ids, probability of each kept
        tail id), each probability being v / total.
        """
        kept_explicit, kept_tail, total = self._kept_prefix(top_k, top_p, min_p)
        explicit = [(token, v / total) for token, v in zip(self.ids[:kept_explicit], self.weights)]
        return explicit, kept_tail, (self.tail_weight / total if kept_tail else 0.0)


# ---------------------------------------------------------------------------------------------------------------
# Section 12: the router
# ---------------------------------------------------------------------------------------------------------------

ROUTER_SALT = 0x524F555445525321


def routes(seed, shape, tokens, start):
    """Section 12: the rows of positions start .. len(tokens) - 2, each a list of layers of K expert ids."""
    layers, experts, per_token = shape
    rows = []
    for p in range(start, len(tokens) - 1):
        h = ExplicitEntries.context_hash(seed, tokens[:p + 1]) ^ ROUTER_SALT
        row = []
        for layer in range(layers):
            r = splitmix64((h + (layer + 1) * GOLDEN) & MASK64)
            chosen = []
            while len(chosen) < per_token:
                r = splitmix64(r)
                e = ((r >> 32) * experts) >> 32
                if e not in chosen:
                    chosen.append(e)
            row.append(chosen)
        rows.append(row)
    return rows


def routes_base64(rows):
    """`meta_info.routed_experts`: base64 of the rows' little-endian int32 values (section 12)."""
    flat = [e for row in rows for layer in row for e in layer]
    return base64.b64encode(struct.pack(f"<{len(flat)}i", *flat)).decode("ascii")


# ---------------------------------------------------------------------------------------------------------------
# Request validation helpers (section 8)
# ---------------------------------------------------------------------------------------------------------------

def _is_int(value):
    """Whether `value` is a JSON integer (an int that is not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(value, name, low=None, high=None):
    """`value` as an int within [low, high], or ValueError."""
    if not _is_int(value) or (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value


def _real(value, name):
    """`value` as a finite float, or ValueError."""
    if not (_is_int(value) or isinstance(value, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _flag(value, name, default):
    """A boolean setting; None means the default."""
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a boolean, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------------------------
# Sections 2 and 13: the vocabularies
# ---------------------------------------------------------------------------------------------------------------

class Vocabulary:
    """What the model needs of a vocabulary (ToyVocabulary, LoadedVocabulary): `vocab_size` (V), `word_count`
    (W), `word_id(x)` (the id of word index x in 0..W), `punctuation_ids` (nine ids, section 4.3), `end_of_turn`
    (slot 8's id), `end_of_sequence_ids` (end-of-turn first), `is_special(id)` (section 4.2), `encode(text)` (a
    `text` prompt), `encode_plain(text)` (without special tokens: scripted answers, stop strings), `decode(ids,
    skip_special_tokens)`, `token_text(id)` and `output_text(sample)` (what makes a sample's text)."""

    vocab_size = 0

    def check_id(self, token_id):
        """ValueError unless `token_id` is an id of the model, 0..V."""
        if not _is_int(token_id) or not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id!r} is outside 0..{self.vocab_size}")


class ToyVocabulary(Vocabulary):
    """Section 2: the toy tokenizer over the ids 0..V (bytes, word pieces, three special tokens)."""

    def __init__(self, vocab_size):
        self.vocab_size = _integer(vocab_size, "vocab_size", 1024, 1_400_000)
        self.word_count = vocab_size - 259
        self.first_special = vocab_size - len(SPECIAL_NAMES)
        self.end_of_turn = vocab_size - 1
        self.end_of_sequence_ids = (vocab_size - 1, vocab_size - 3)
        self.punctuation_ids = PUNCTUATION

    def is_special(self, token_id):
        """Whether an id is one of the special tokens `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`."""
        return token_id >= self.first_special

    @staticmethod
    def word_id(index):
        """Section 4.3: word index x is the id 256 + x."""
        return FIRST_WORD_ID + index

    def _word_text(self, token_id):
        """Section 2.1, id to word: the text of a word-piece id."""
        w = token_id - FIRST_WORD_ID
        u = w // 2
        count = 1 if u < WORD_OFFSETS[1] else 2 if u < WORD_OFFSETS[2] else 3
        index = u - WORD_OFFSETS[count - 1]
        digits = (index % 90, (index // 90) % 90, (index // 8100) % 90)[:count]
        syllables = "".join(CONSONANTS[d // 5] + VOWELS[d % 5] for d in digits)
        return (" " if w % 2 == 0 else "") + syllables

    def token_bytes(self, token_id, skip_special_tokens):
        """Section 2.2: the bytes of one id."""
        self.check_id(token_id)
        if token_id < FIRST_WORD_ID:
            return bytes((token_id,))
        if token_id >= self.first_special:
            return b"" if skip_special_tokens else _SPECIAL_BYTES[token_id - self.first_special]
        return self._word_text(token_id).encode("ascii")

    def decode(self, ids, skip_special_tokens=True):
        """Section 2.2: the text of a sequence of ids, ill-formed UTF-8 replaced by U+FFFD."""
        return b"".join(self.token_bytes(t, skip_special_tokens) for t in ids).decode("utf-8", "replace")

    def token_text(self, token_id):
        """Section 2.2: one token's text, as `return_text_in_logprobs` reports it."""
        self.check_id(token_id)
        if token_id >= self.first_special:
            return SPECIAL_NAMES[token_id - self.first_special]
        if token_id >= FIRST_WORD_ID:
            return self._word_text(token_id)
        return chr(token_id) if token_id < 128 else "\ufffd"

    def _match_word(self, data, pos):
        """Section 2.3, rule 2: (id, bytes consumed) of the longest word piece starting at `pos`, or None."""
        space = data[pos] == 32
        start = pos + (1 if space else 0)
        digits = []
        while len(digits) < 3 and start + 2 * len(digits) + 1 < len(data):
            consonant = _CONSONANT_INDEX.get(data[start + 2 * len(digits)])
            vowel = _VOWEL_INDEX.get(data[start + 2 * len(digits) + 1])
            if consonant is None or vowel is None:
                break
            digits.append(consonant * 5 + vowel)
        for s in range(len(digits), 0, -1):
            index = sum(d * 90 ** place for place, d in enumerate(digits[:s]))
            w = 2 * (WORD_OFFSETS[s - 1] + index) + (0 if space else 1)
            if w < self.word_count:
                return FIRST_WORD_ID + w, (1 if space else 0) + 2 * s
        return None

    def encode(self, text):
        """Section 2.3: greedy left-to-right encoding of the UTF-8 bytes of `text`."""
        data = text.encode("utf-8")
        ids = []
        pos = 0
        while pos < len(data):
            if data[pos] == ord("<"):
                special = next((i for i, name in enumerate(_SPECIAL_BYTES) if data.startswith(name, pos)), None)
                if special is not None:
                    ids.append(self.first_special + special)
                    pos += len(_SPECIAL_BYTES[special])
                    continue
            word = self._match_word(data, pos)
            if word is not None:
                ids.append(word[0])
                pos += word[1]
                continue
            ids.append(data[pos])
            pos += 1
        return ids

    # The toy tokenizer adds nothing around a text: encoding with and without special tokens is one.
    encode_plain = encode

    def output_text(self, sample):
        """Section 9's text of a sample's output."""
        return _ToyText(self, sample)


class LoadedVocabulary(Vocabulary):
    """Section 13: the vocabulary of a Hugging Face tokenizer (`--tokenizer PATH`), read with the `tokenizers`
    package (imported here only: the toy model needs nothing beyond the standard library).

    Besides what every Vocabulary has it keeps `tokens` (T, one more than the largest id of the tokenizer),
    `special_ids`, `content_ids` (C, ascending) and `tokenizer` (the library's Tokenizer)."""

    def __init__(self, path, vocab_size=None):
        from tokenizers import Tokenizer

        path = os.fspath(path)
        directory, file = (path, os.path.join(path, "tokenizer.json")) if os.path.isdir(path) else (
            os.path.dirname(path), path)
        self.tokenizer = Tokenizer.from_file(file)
        # Section 13.3: prompts are encoded whole, whatever the file says of truncation and padding.
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        config = _read_json(os.path.join(directory, "tokenizer_config.json"))
        generation = _read_json(os.path.join(directory, "generation_config.json"))
        model_config = _read_json(os.path.join(directory, "config.json"))

        vocabulary = self.tokenizer.get_vocab(with_added_tokens=True)
        self.tokens = max(vocabulary.values()) + 1
        added = self.tokenizer.get_added_tokens_decoder()
        self.special_ids = frozenset(token_id for token_id, token in added.items() if token.special)

        # Section 13.2: V is --vocab-size, else config.json's vocab_size, else T.
        if vocab_size is None:
            vocab_size = (model_config or {}).get("vocab_size") or self.tokens
        self.vocab_size = _integer(vocab_size, "vocab_size", self.tokens, (1 << 21) - 1)

        eos = []
        eos_token_id = (generation or {}).get("eos_token_id")
        for token_id in eos_token_id if isinstance(eos_token_id, list) else (
                [] if eos_token_id is None else [eos_token_id]):
            if token_id not in eos:
                eos.append(_integer(token_id, "eos_token_id", 0))
        eos_token = (config or {}).get("eos_token")
        if isinstance(eos_token, dict):
            eos_token = eos_token.get("content")
        if eos_token is not None:
            token_id = self.tokenizer.token_to_id(eos_token)
            if token_id is None:
                raise ValueError(f"eos_token {eos_token!r} is not a token of {file}")
            if token_id not in eos:
                eos.append(token_id)
        if not eos:
            raise ValueError(f"{file}: the model has no end-of-sequence token")
        self.end_of_sequence_ids = tuple(eos)
        self.end_of_turn = eos[0]

        punctuation = []
        for byte in PUNCTUATION:
            ids = self.encode_plain(chr(byte))
            if not ids or ids[0] in eos:
                raise ValueError(f"{file}: {chr(byte)!r} encodes to {ids}, which has no punctuation id")
            punctuation.append(ids[0])
        self.punctuation_ids = tuple(punctuation)

        has_token = set(vocabulary.values())
        excluded = set(added).union(eos, punctuation)
        self.content_ids = [c for c in range(self.tokens) if c in has_token and c not in excluded]
        self.word_count = len(self.content_ids)
        if self.word_count < 16:
            raise ValueError(f"{file}: the model needs at least 16 ordinary tokens, this one has {self.word_count}")

    def is_special(self, token_id):
        """Whether an id is an added token marked special."""
        return token_id in self.special_ids

    def word_id(self, index):
        """Section 13.2: word index x is the content id C[x]."""
        return self.content_ids[index]

    def encode(self, text):
        """Section 13.3: a `text` prompt's ids, with what the tokenizer's post-processor adds."""
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def encode_plain(self, text):
        """Section 13.3: the ids of a text without special tokens (scripted answers, stop strings' lengths)."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens=True):
        """Section 13.3: the library's decoding; ids without a token decode to nothing."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id):
        """Section 13.3: one token's text, `decode([id], false)`."""
        self.check_id(token_id)
        return self.decode([token_id], skip_special_tokens=False)

    def output_text(self, sample):
        """Section 13.4's text of a sample's output: SGLang's incremental detokenizer."""
        return _Detokenizer(self, sample)


def _read_json(path):
    """The parsed JSON of a file that may be absent (None)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------------------------

class ToyModel:
    """The toy model with its server configuration (section 1): tokenizer, distributions and /generate.

    `tokenizer`: the server's `--tokenizer PATH` (section 13), None for the toy tokenizer of section 2;
    `vocab_size`: its `--vocab-size` (None: 151,936 for the toy tokenizer, section 13.2's V for a loaded one);
    `stream_interval`: its `--stream-interval`, the default of a streamed request's chunk schedule (13.4)."""

    def __init__(self, seed=0, vocab_size=None, context_length=32768, sglang_version="0.5.23",
                 return_original_logprob=False, scripts=None, deterministic_inference=False,
                 enable_return_routed_experts=False, moe_shape=(48, 128, 8), sampling_mask_max_tokens=4096,
                 tokenizer=None, stream_interval=1, slime_patches=False, model_path=None):
        self.seed = _integer(seed, "seed", 0, MASK64)
        # Section 14: the weights of a toy policy directory, None for the base model.
        self.policy = Policy.load(model_path) if model_path is not None else None
        if tokenizer is None:
            self.vocab = ToyVocabulary(151936 if vocab_size is None else vocab_size)
        else:
            self.vocab = LoadedVocabulary(tokenizer, vocab_size)
        self.stream_interval = _integer(stream_interval, "stream_interval", 1)
        self.context_length = _integer(context_length, "context_length", 1)
        self.sglang_version = _release(sglang_version)
        self.deterministic_inference = bool(deterministic_inference)
        self.return_original_logprob = bool(return_original_logprob)
        self.scripts = [self._script_rule(rule) for rule in (scripts or ())]
        self.enable_return_routed_experts = bool(enable_return_routed_experts)
        layers, experts, per_token = (_integer(x, "moe_shape", 1) for x in moe_shape)
        if per_token > experts:
            raise ValueError("num_experts_per_tok must be at most num_experts")
        self.moe_shape = (layers, experts, per_token)
        self.sampling_mask_max_tokens = _integer(sampling_mask_max_tokens, "sampling_mask_max_tokens", 1)
        self.slime_patches = bool(slime_patches)
        # Section 8.3: the draws of unseeded samples so far, by (prompt_hash, position).
        self.draw_counts = {}

    def reset_draws(self):
        """Section 8.3: forget every draw, as the server's /admin/reset does."""
        self.draw_counts.clear()

    @staticmethod
    def _script_rule(rule):
        """One scripted rule of section 8.4, with its finish_reason defaulting to "stop"."""
        if not isinstance(rule, dict):
            raise ValueError("a script rule must be an object")
        contains, answer = rule.get("prompt_contains"), rule.get("answer")
        finish = rule.get("finish_reason", "stop")
        if finish is None:
            finish = "stop"
        if not isinstance(contains, str) or not isinstance(answer, str) or finish not in ("stop", "length"):
            raise ValueError(f"invalid script rule {rule!r}")
        return {"prompt_contains": contains, "answer": answer, "finish_reason": finish}

    # -- Sections 2 and 13: the tokenizer --------------------------------------------------------------------

    @property
    def loaded(self):
        """Whether the model runs over a loaded tokenizer (section 13)."""
        return isinstance(self.vocab, LoadedVocabulary)

    @property
    def vocab_size(self):
        """V: the model's ids are 0..V."""
        return self.vocab.vocab_size

    @property
    def word_count(self):
        """W: the ids the word slots draw from (section 4.3)."""
        return self.vocab.word_count

    @property
    def end_of_sequence_ids(self):
        """The ids that end a sample (unless ignore_eos) and that min_new_tokens masks, end-of-turn first."""
        return self.vocab.end_of_sequence_ids

    def encode(self, text):
        """A `text` prompt's ids (section 2.3, or 13.3 over a loaded tokenizer)."""
        return self.vocab.encode(text)

    def decode(self, ids, skip_special_tokens=True):
        """The text of a sequence of ids (section 2.2, or 13.3)."""
        return self.vocab.decode(ids, skip_special_tokens)

    def token_text(self, token_id):
        """One token's text, as `return_text_in_logprobs` reports it (section 2.2, or 13.3)."""
        return self.vocab.token_text(token_id)

    # -- Sections 4 to 7: the distribution at one context ----------------------------------------------------

    def explicit_entries(self, context):
        """Sections 4.1 to 4.3 for a context (a non-empty sequence of ids in the vocabulary)."""
        context = list(context)
        if not context:
            raise ValueError("a context is a non-empty sequence of ids")
        for token in context:
            self.vocab.check_id(token)
        return ExplicitEntries(self.seed, self.vocab, context, self.policy)

    def distribution(self, context, temperature, masked=()):
        """The distribution at `context`, temperature T > 0 and the set of masked ids (sections 4 and 5)."""
        temperature = _real(temperature, "temperature")
        return Distribution(self.vocab_size, self.explicit_entries(context).entries, temperature, masked)

    # -- Section 8: from a request to samples ----------------------------------------------------------------

    def _prompts(self, body):
        """Section 8.1: (the prompts of the request as lists of ids, whether the request is a batch).

        `text`, when given, decides the shape (a list of texts may be empty: no prompts); `input_ids`, when given,
        supplies the ids, also beside `text`. The pairings SGLang fails on (HTTP 500) raise ValueError here too.
        """
        text, input_ids = body.get("text"), body.get("input_ids")
        if text is None and input_ids is None:
            raise ValueError("Either text, input_ids or input_embeds should be provided.")
        if input_ids is not None and not isinstance(input_ids, list):
            raise ValueError("input_ids must be a list")
        nested = input_ids is not None and bool(input_ids) and all(isinstance(p, list) for p in input_ids)
        if text is not None:
            batch = isinstance(text, list)
            texts = text if batch else [text]
            if not all(isinstance(t, str) for t in texts):
                raise ValueError("text must be a string or a list of strings")
            count = len(texts)
        elif not input_ids:
            raise ValueError("input_ids cannot be empty.")
        else:
            batch = nested
            count = len(input_ids) if batch else 1
        if input_ids is None:
            prompts = []
            for t in texts:
                ids = self.encode(t) if t else []
                if not ids:
                    raise ValueError("texts cannot be empty and tokenizer must be initialized")
                prompts.append(ids)
        elif not batch:
            if nested:
                raise ValueError("a single prompt needs a flat input_ids (SGLang: a TypeError, HTTP 500)")
            prompts = [input_ids]
        elif count == 0:
            prompts = []
        elif not nested:
            raise ValueError("a batch needs input_ids as a list of lists (SGLang: a TypeError, HTTP 500)")
        elif len(input_ids) < count:
            raise ValueError("input_ids has fewer lists than text has prompts (SGLang: an IndexError, HTTP 500)")
        else:
            prompts = input_ids[:count]  # lists past the batch are ignored, unchecked
        for prompt in prompts:
            if not isinstance(prompt, list) or not prompt:
                raise ValueError("input_ids cannot be empty.")
            if not all(_is_int(token) for token in prompt):
                raise ValueError("input_ids must hold integers")
            if not all(0 <= token < self.vocab_size for token in prompt):
                raise ValueError(f"The input_ids {prompt} contains values greater than the vocab size "
                                 f"({self.vocab_size}).")
        return prompts, batch

    @staticmethod
    def _per_prompt(value, per_prompt, count, n, name):
        """Section 8.1: a setting given once for all samples or as a list with one value per prompt."""
        if not per_prompt:
            return [value] * count
        if n > 1:
            raise ValueError(f"{name} cannot be a list when n > 1")
        if len(value) != count:
            raise ValueError(f"{name} must have one value per prompt")
        return value

    def _sampling_settings(self, params, prompt):
        """Section 8.2 (and 8.4's max_new_tokens rule): the sampling settings of one prompt."""
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise ValueError("sampling_params must be an object")

        def get(name, default):
            value = params.get(name)
            return default if value is None else value

        temperature = _real(get("temperature", 1.0), "temperature")
        if temperature < 0:
            raise ValueError("temperature must be at least 0")
        top_k = _integer(get("top_k", -1), "top_k", -1)
        if top_k == 0:
            raise ValueError("top_k must be -1 or at least 1")
        top_p = _real(get("top_p", 1.0), "top_p")
        if not 0 < top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        min_p = _real(get("min_p", 0.0), "min_p")
        if not 0 <= min_p <= 1:
            raise ValueError("min_p must be in [0, 1]")
        if temperature < GREEDY_BELOW:
            temperature, top_k = 1.0, 1
        if top_k == -1 or top_k >= self.vocab_size:
            top_k = None

        # The context window: a prompt of L tokens or more, and an explicit max_new_tokens that overflows the
        # window, are refused; what passes is capped.
        prompt_len, context = len(prompt), self.context_length
        if prompt_len >= context:
            raise ValueError(f"The input ({prompt_len} tokens) is longer than the model's context length "
                             f"({context} tokens).")
        # Absent is 128 (not checked against the window); an explicit null is no limit but the window.
        requested = params.get("max_new_tokens", 128)
        if requested is not None:
            requested = _integer(requested, "max_new_tokens", 0)
            if "max_new_tokens" in params and prompt_len + requested > context:
                raise ValueError(
                    f"Requested token count exceeds the model's maximum context length of {context} tokens. "
                    f"You requested a total of {prompt_len + requested} tokens: {prompt_len} tokens from the "
                    f"input messages and {requested} tokens for the completion. Please reduce the number of "
                    f"tokens in the input messages or the completion to fit within the limit.")
        min_new_tokens = _integer(get("min_new_tokens", 0), "min_new_tokens", 0)
        if requested is not None and min_new_tokens > requested:
            raise ValueError(f"min_new_tokens must be in [0, max_new_tokens({requested})], got {min_new_tokens}.")
        room = max(0, context - prompt_len - 2)
        max_new_tokens = room if requested is None else min(requested, room)
        min_new_tokens = min(min_new_tokens, max_new_tokens)

        stop = get("stop", [])
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise ValueError("stop must be a string or a list of strings")
        stop_regex = get("stop_regex", [])
        if stop_regex and self.sglang_version < STOP_REGEX_SINCE:
            raise ValueError("stop_regex is not a sampling parameter of this release")
        stop_regex = [stop_regex] if isinstance(stop_regex, str) else list(stop_regex)
        if not all(isinstance(p, str) for p in stop_regex):
            raise ValueError("stop_regex must be a string or a list of strings")
        stop_token_ids = get("stop_token_ids", [])
        if not isinstance(stop_token_ids, list) or not all(_is_int(t) for t in stop_token_ids):
            raise ValueError("stop_token_ids must be a list of integers")
        # Any value is kept; only an integer (a boolean, an integral float) seeds the sampler (section 8.3).
        sampling_seed = params.get("sampling_seed")
        if sampling_seed is None and "sampling_seed" in params and self.sglang_version < SEED_MAY_BE_NULL_SINCE:
            raise ValueError("sampling_seed should not be None")
        if sampling_seed is not None and self.sglang_version >= SEED_GATED_SINCE:
            if not _is_int(sampling_seed):
                raise ValueError(f"invalid type: {sampling_seed!r}, expected i64")
            if not -2 ** 63 <= sampling_seed < 2 ** 63:
                raise ValueError(f"sampling_seed must be in [-2**63, 2**63 - 1], got {sampling_seed}.")
        # Section 13.4: a streamed request's chunk schedule; 0 or less is the server's.
        stream_interval = _integer(get("stream_interval", 0), "stream_interval")
        stream_interval = stream_interval if stream_interval > 0 else self.stream_interval

        forced = []
        if self.scripts:
            prompt_text = self.decode(prompt, skip_special_tokens=False)
            rule = next((r for r in self.scripts if r["prompt_contains"] in prompt_text), None)
            if rule is not None:
                forced = self.vocab.encode_plain(rule["answer"])
                if rule["finish_reason"] == "stop":
                    forced.append(self.vocab.end_of_turn)
                else:
                    max_new_tokens = min(max_new_tokens, len(forced))

        return dict(
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
            max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
            stop=[s for s in stop if s], stop_regex=stop_regex,
            # Check 6.3's tail window: the stop strings' lengths in tokens (the empty ones too) and the patterns'.
            stop_window=max([len(self.vocab.encode_plain(s)) for s in stop] + [_measure(p) for p in stop_regex],
                            default=0) + 1 if stop or stop_regex else None,
            stop_token_ids=[t for t in stop_token_ids if 0 <= t < self.vocab_size],
            ignore_eos=_flag(params.get("ignore_eos"), "ignore_eos", False),
            skip_special_tokens=_flag(params.get("skip_special_tokens"), "skip_special_tokens", True),
            no_stop_trim=_flag(params.get("no_stop_trim"), "no_stop_trim", False),
            sampling_seed=sampling_seed, forced=forced, stream_interval=stream_interval,
        )

    def _logprob_settings(self, return_logprob, start, top_num, token_ids, prompt):
        """Section 8.5: the logprob settings of one prompt."""
        return_logprob = _flag(return_logprob, "return_logprob", False)
        start = _integer(-1 if start is None else start, "logprob_start_len")
        prompt_end = self.sglang_version >= PROMPT_END_LOGPROB_START_SINCE
        if start < 0:  # -1, and any other negative value read as -1
            start = len(prompt) if prompt_end else len(prompt) - 1
        elif return_logprob and (start > len(prompt) if prompt_end else start >= len(prompt)):
            raise ValueError(f"req.logprob_start_len={start} is higher than the number of input tokens "
                             f"len(req.origin_input_ids)={len(prompt)}. Please use a smaller logprob_start_len.")
        top_num = min(max(_integer(0 if top_num is None else top_num, "top_logprobs_num"), 0), self.vocab_size)
        if token_ids is not None and (not isinstance(token_ids, list) or not all(_is_int(t) for t in token_ids)):
            raise ValueError("token_ids_logprob must be a flat list of integers.")
        # Checked whether or not return_logprob is set; [] is the same as absent.
        for token in token_ids or ():
            if not 0 <= token < self.vocab_size:
                raise ValueError(f"token_ids_logprob contains out-of-vocabulary token id {token}; valid range is "
                                 f"[0, {self.vocab_size}).")
        return dict(return_logprob=return_logprob, logprob_start_len=start, top_logprobs_num=top_num,
                    token_ids_logprob=token_ids or None)

    def _samples(self, body):
        """Section 8.1: the flattened samples of a request, in position order, each with its settings."""
        prompts, batch = self._prompts(body)
        if not prompts:
            return []
        count = len(prompts)
        params = body.get("sampling_params")
        params_list = params if isinstance(params, list) else [params] * count
        if len(params_list) != count:
            raise ValueError("sampling_params must have one object per prompt")
        ns = set()
        for p in params_list:
            if p is not None and not isinstance(p, dict):
                raise ValueError("sampling_params must be an object or a list of objects")
            n = (p or {}).get("n")
            ns.add(_integer(1 if n is None else n, "n", 1))
        if len(ns) != 1:
            raise ValueError("every prompt must ask for the same n")
        n = ns.pop()

        token_ids = body.get("token_ids_logprob")
        per_prompt_ids = (isinstance(token_ids, list) and bool(token_ids)
                          and all(t is None or isinstance(t, list) for t in token_ids))
        if per_prompt_ids and not batch:
            raise ValueError("token_ids_logprob must be a flat list of integers.")
        columns = [
            self._per_prompt(body.get(name), isinstance(body.get(name), list), count, n, name)
            for name in ("return_logprob", "logprob_start_len", "top_logprobs_num")
        ]
        columns.append(self._per_prompt(token_ids, per_prompt_ids, count, n, "token_ids_logprob"))

        # Section 7.1 and section 12.
        masks = self.sglang_version >= SAMPLING_MASKS_SINCE
        mask_column = self._per_prompt(body.get("return_sampling_mask") if masks else None,
                                       isinstance(body.get("return_sampling_mask"), list), count, n,
                                       "return_sampling_mask")
        mode_column = self._per_prompt(body.get("sampling_logprobs_mode") if masks else None,
                                       isinstance(body.get("sampling_logprobs_mode"), list), count, n,
                                       "sampling_logprobs_mode")
        stream = _flag(body.get("stream"), "stream", False)
        routes_from = None
        if self.sglang_version >= ROUTED_EXPERTS_SINCE and _flag(body.get("return_routed_experts"),
                                                                 "return_routed_experts", False):
            routes_from = _integer(body.get("routed_experts_start_len", 0), "routed_experts_start_len", 0)
            if any(routes_from > len(prompt) for prompt in prompts):
                raise ValueError("routed_experts_start_len is past the prompt")
            if not self.enable_return_routed_experts:
                routes_from = None

        samples = []
        for b, prompt in enumerate(prompts):
            settings = self._sampling_settings(params_list[b], prompt)
            settings.update(self._logprob_settings(*(column[b] for column in columns), prompt))
            mask_mode = None
            if _flag(mask_column[b], "return_sampling_mask", False):
                mask_mode = mode_column[b] or "selected"
                if mask_mode not in ("selected", "support"):
                    raise ValueError("sampling_logprobs_mode must be 'selected' or 'support'")
                self._check_mask_top_k(params_list[b])
            settings.update(sampling_mask=mask_mode, routes_from=routes_from, stream=stream,
                            top_p_rows=self._top_p_rows(params_list[b], settings))
            for j in range(n):
                samples.append(SimpleNamespace(prompt=prompt, position=b * n + j, **settings))
        return samples

    def _top_p_rows(self, params, settings):
        """Section 7.2: whether slime's top-p replay reports rows for this prompt: a patched server, logprobs, a
        truthy `custom_params.return_top_p_token_ids` and a sampler that filters (greedy is top_k 1)."""
        custom = (params or {}).get("custom_params")
        asked = isinstance(custom, dict) and bool(custom.get("return_top_p_token_ids", False))
        top_k = (params or {}).get("top_k")
        filters = (settings["top_k"] == 1 or top_k not in (None, -1, 1 << 30) or settings["top_p"] != 1
                   or settings["min_p"] > 0)
        return self.slime_patches and settings["return_logprob"] and asked and filters

    def _check_mask_top_k(self, params):
        """Section 7.1: a mask needs greedy sampling or a top_k in 1..cap (-1 reads as 2^30)."""
        params = params or {}
        temperature = params.get("temperature")
        if temperature is not None and 0 <= temperature < GREEDY_BELOW:
            return
        top_k = params.get("top_k")
        top_k = (1 << 30) if top_k is None or top_k == -1 else top_k
        if not 1 <= top_k <= self.sampling_mask_max_tokens:
            raise ValueError(f"return_sampling_mask needs greedy sampling or top_k in 1..cap, got {top_k}")

    @staticmethod
    def _prompt_hash(prompt):
        """Section 8.3's prompt_hash."""
        prompt_hash = PROMPT_HASH_START
        for token in prompt:
            prompt_hash = mix(prompt_hash, token)
        return prompt_hash

    def _seed_of(self, sample):
        """Section 8.3: the integer that seeds a sample, or None when it is unseeded."""
        seed = sample.sampling_seed
        if isinstance(seed, bool) or (isinstance(seed, float) and math.isfinite(seed) and seed == int(seed)):
            seed = int(seed)
        if self.deterministic_inference and not _is_int(seed):
            seed = DETERMINISTIC_SEED
        return seed if _is_int(seed) else None

    def _assign_draw(self, sample):
        """Section 8.3: an unseeded sample takes the next draw of its prompt at its position, and counts it."""
        sample.draw = 0
        if self._seed_of(sample) is None:
            key = (self._prompt_hash(sample.prompt), sample.position)
            sample.draw = self.draw_counts.get(key, 0)
            self.draw_counts[key] = sample.draw + 1

    def _sample_key(self, sample):
        """Section 8.3: the key of a sample's randomness."""
        prompt_hash = self._prompt_hash(sample.prompt)
        seed = sample.sampling_seed
        if isinstance(seed, bool) or (isinstance(seed, float) and math.isfinite(seed) and seed == int(seed)):
            seed = int(seed)
        position = sample.position
        if self.deterministic_inference:
            # Every sample is seeded (42 by default) and draws as the first of its request does.
            seed = seed if _is_int(seed) else DETERMINISTIC_SEED
            position = 0
        if _is_int(seed):
            seed_part = mix(SEED_SALT, seed & MASK64)
        elif getattr(sample, "draw", 0) == 0:
            seed_part = NO_SEED
        else:
            seed_part = mix(DRAW_SALT, sample.draw)
        return mix(mix(mix(self.seed, prompt_hash), seed_part), position)

    # -- Section 9: generation and finish checks -------------------------------------------------------------

    def generate(self, body):
        """Answer a /generate request body (sections 8 and 9): one dict per flattened sample, in position order."""
        if not isinstance(body, dict):
            raise ValueError("the request body must be an object")
        with_text = _flag(body.get("return_text_in_logprobs"), "return_text_in_logprobs", False)
        samples = self._samples(body)
        for sample in samples:
            self._assign_draw(sample)
        return [self._generate_sample(sample, with_text) for sample in samples]

    def _entry(self, token_id, logprob, with_text):
        """One reported logprob [logprob, id, text] (sections 8.5, 2.2); a logprob of None or -inf is None."""
        text = self.token_text(token_id) if with_text else None
        return [None if logprob is None or logprob == -math.inf else logprob, token_id, text]

    def _report(self, dist, token, sample, with_text, renormalised=None):
        """The logprob entry of `token`, the top list and the token-id list under `dist` (sections 8.5, 9), or
        under `renormalised`, a function from id to logprob (section 7.2), where the top list's order is still
        `dist`'s."""
        logprob = dist.logprob if renormalised is None else renormalised
        top = [self._entry(t, logprob(t), with_text) for t, _ in dist.top(sample.top_logprobs_num)]
        ids = [self._entry(t, logprob(t), with_text) for t in sample.token_ids_logprob or ()]
        return self._entry(token, logprob(token), with_text), top, ids

    def _generate_sample(self, sample, with_text):
        """Section 9: generate one sample and build its answer."""
        prompt = sample.prompt
        report_temperature = 1.0 if self.return_original_logprob else sample.temperature
        logprobs = {"input": ([], [], []), "output": ([], [], [])}

        if sample.return_logprob:
            for p in range(sample.logprob_start_len, len(prompt)):
                if p == sample.logprob_start_len:
                    reported = (self._entry(prompt[p], None, with_text), None, None)  # SGLang's [None] + raw[:-1]
                else:
                    reported = self._report(self.distribution(prompt[:p], report_temperature), prompt[p],
                                            sample, with_text)
                for column, value in zip(logprobs["input"], reported):
                    column.append(value)

        output = []
        masks = []
        rows = []
        if sample.max_new_tokens == 0:
            finish, text = {"type": "length", "length": 0}, ""
        else:
            finish, text = self._decode_loop(sample, output, logprobs["output"], report_temperature, with_text,
                                             masks, rows)

        result = {
            "output_ids": output,
            "text": text,
            "finish_reason": finish,
            "prompt_tokens": len(prompt),
            "completion_tokens": len(output),
        }
        if sample.return_logprob:
            for where in ("input", "output"):
                entries, tops, ids = logprobs[where]
                result[f"{where}_token_logprobs"] = entries
                if sample.top_logprobs_num > 0:
                    result[f"{where}_top_logprobs"] = tops
                if sample.token_ids_logprob:
                    result[f"{where}_token_ids_logprobs"] = ids
        if sample.sampling_mask is not None:
            result["output_token_sampling_mask"] = [ids for ids, _ in masks]
            none_if_inf = lambda lp: None if lp == -math.inf else lp  # noqa: E731
            if sample.sampling_mask == "selected":
                result["output_token_sampling_logprobs"] = [none_if_inf(lps[0]) for _, lps in masks]
            else:
                result["output_token_sampling_logprobs"] = [[none_if_inf(lp) for lp in lps] for _, lps in masks]
            result["output_token_sampling_mask_length"] = len(masks)
        if rows:
            # Section 7.2: slime's `_encode_top_p_token_ids`, written with the finish reason.
            flat = [token for row in rows for token in row]
            offsets = [0]
            for row in rows:
                offsets.append(offsets[-1] + len(row))
            result["top_p_token_ids"] = base64.b64encode(struct.pack(f"<{len(flat)}i", *flat)).decode("ascii")
            result["top_p_token_offsets"] = base64.b64encode(
                struct.pack(f"<{len(offsets)}i", *offsets)).decode("ascii")
        if sample.routes_from is not None:
            result["routed_experts"] = routes_base64(
                routes(self.seed, self.moe_shape, prompt + output, sample.routes_from))
        return result

    def _finish_checks(self):
        """Section 9 step 6: the release's order of the finish checks."""
        if self.sglang_version >= LENGTH_LAST_SINCE:
            return ("stop text", "stop id", "length")
        if self.sglang_version >= TEXT_BEFORE_STOP_ID_SINCE:
            return ("length", "stop text", "stop id")
        return ("length", "stop id", "stop text")

    def _decode_loop(self, sample, output, reported, report_temperature, with_text, masks, rows):
        """Section 9, steps 1 to 6 for j = 0, 1, ...: fills `output` and returns (finish_reason, text)."""
        key = self._sample_key(sample)
        end_of_sequence = frozenset(self.end_of_sequence_ids).union(sample.stop_token_ids)  # step 2's mask M
        stop_ids = frozenset() if sample.ignore_eos else end_of_sequence  # check 6.2
        text = self.vocab.output_text(sample)
        for j in range(sample.max_new_tokens):
            context = sample.prompt + output
            masked = end_of_sequence if j < sample.min_new_tokens else ()
            dist = self.distribution(context, sample.temperature, masked)
            if j < len(sample.forced):
                token = sample.forced[j]
            else:
                token = dist.sample(sample.top_k, sample.top_p, sample.min_p, unit(mix(key, j)))
            if sample.sampling_mask is not None:
                if j < len(sample.forced):
                    # Section 7.1: a scripted id is forced decoding, the one choice the sampler had.
                    masks.append(([token], [0.0]))
                else:
                    ids, logprobs, selected = dist.support(sample.top_k, sample.top_p, sample.min_p, token)
                    masks.append((ids, [selected] if sample.sampling_mask == "selected" else logprobs))
            renormalised = None
            if sample.top_p_rows:
                if j < len(sample.forced):
                    # Section 7.2: a scripted id is not sampled; its row is itself, its logprobs the model's.
                    rows.append([token])
                else:
                    kept, renormalised = dist.kept_prefix(sample.top_k, sample.top_p, sample.min_p)
                    rows.append(kept)
                    # The greedy path and the original-logprob mode report the model's logprobs.
                    if sample.top_k == 1 or self.return_original_logprob:
                        renormalised = None
            if sample.return_logprob:
                if report_temperature != sample.temperature:
                    dist = self.distribution(context, report_temperature, masked)
                for column, value in zip(reported, self._report(dist, token, sample, with_text, renormalised)):
                    column.append(value)
            output.append(token)
            text.push(token)

            for check in self._finish_checks():
                finish = None
                if check == "length" and len(output) >= sample.max_new_tokens:
                    finish = {"type": "length", "length": sample.max_new_tokens}
                elif check == "stop id" and token in stop_ids:
                    finish = {"type": "stop", "matched": token}
                elif check == "stop text":
                    matched = text.matched_stop(output)
                    if matched is not None:
                        finish = {"type": "stop", "matched": matched}
                if finish is not None:
                    return finish, text.finished(output, finish)
            text.running(output)
        finish = {"type": "length", "length": sample.max_new_tokens}
        return finish, text.finished(output, finish)


def _measure(pattern):
    """Section 8.2: the most characters a match of `pattern` spans, as SGLang counts them."""
    import re._parser as parser

    def walk(items):
        total = 0
        for op, value in items:
            if op in (parser.LITERAL, parser.IN, parser.ANY):
                total += 1
            elif op == parser.SUBPATTERN:
                total += walk(value[3])
            elif op == parser.BRANCH:
                total += max(walk(branch) for branch in value[1])
            elif op in (parser.MAX_REPEAT, parser.MIN_REPEAT):
                total += UNMEASURED if value[1] == parser.MAXREPEAT else value[1] * walk(value[2])
            elif op == parser.AT:
                pass
            else:
                total += UNMEASURED
        return total

    return walk(parser.parse(pattern))


def _matched_pattern(sample, vocab, output):
    """Check 6.3's patterns: the first that `re.search` finds in the tail (special tokens kept)."""
    tail = vocab.decode(output[-min(sample.stop_window, len(output)):], skip_special_tokens=False)
    return next((p for p in sample.stop_regex if re.search(p, tail)), None)


class _ToyText:
    """Section 9's output text over the toy tokenizer: the output's bytes decoded incrementally."""

    def __init__(self, vocab, sample):
        self.vocab, self.sample = vocab, sample
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.complete = ""

    def push(self, token):
        """Step 5: the id's bytes join the text (bytes of an unfinished character wait for the next id)."""
        self.complete += self.decoder.decode(self.vocab.token_bytes(token, self.sample.skip_special_tokens))

    def matched_stop(self, output):
        """Check 6.3: the first stop string, in order, that occurs in the text, else the first pattern found in
        the tail."""
        matched = next((s for s in self.sample.stop if s in self.complete), None)
        if matched is None and self.sample.stop_regex:
            matched = _matched_pattern(self.sample, self.vocab, output)
        return matched

    def running(self, output):
        """The sample runs on: nothing to do (the text is a function of the ids)."""

    def finished(self, output, finish):
        """The output text when the sample finishes with `finish`."""
        matched = finish.get("matched")
        if isinstance(matched, str):
            at = self.complete.find(matched)
            if at < 0:
                return self.complete
            return self.complete[:at + (len(matched) if self.sample.no_stop_trim else 0)]
        trimmed = output[:-1] if matched is not None and not self.sample.no_stop_trim else output
        return self.vocab.decode(trimmed, self.sample.skip_special_tokens)


SURROGATE_IDS = 5  # section 13.4: the prompt ids the detokenizer's first window starts with
FORCE_STREAM_INTERVAL = 50  # section 13.4: a whole answer reaches the detokenizer every 50 tokens
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_cjk(character):
    return any(low <= ord(character) <= high for low, high in CJK_RANGES)


def find_printable_text(text):
    """Section 13.4's `find_printable_text`: the part of uncommitted text that holds whole words."""
    if text.endswith("\n") or (text and _is_cjk(text[-1])):
        return text
    if len(text) > 1 and _is_cjk(text[-2]):
        return text[:-1]
    return text[:text.rfind(" ") + 1]


def chunk_due(length, interval):
    """Section 13.4: whether a streamed chunk is due after `length` output ids."""
    return interval <= 1 or length % interval == 1


class _Detokenizer:
    """Section 13.4: the output text over a loaded tokenizer, made by SGLang's incremental detokenizer, with its
    stop-string tail and the schedule of its calls."""

    def __init__(self, vocab, sample):
        self.vocab, self.sample = vocab, sample
        surrogate = min(SURROGATE_IDS, len(sample.prompt))
        self.ids = list(sample.prompt[len(sample.prompt) - surrogate:])
        self.surr, self.read = 0, surrogate
        self.committed = ""
        self.sent = 0
        self.emitted = []
        self.window = sample.stop_window
        self.holds = False

    def _decode(self, ids):
        return self.vocab.decode(ids, self.sample.skip_special_tokens)

    def push(self, token):
        self.ids.append(token)

    def matched_stop(self, output):
        """The first stop string, in order, in the tail; notes whether the tail holds the start of one."""
        if self.window is None:
            return None
        tail = self.vocab.decode(output[-min(self.window, len(output)):], skip_special_tokens=False)
        matched = next((s for s in self.sample.stop if s in tail), None)
        self.holds = matched is None and any(
            tail.endswith(s[:length]) for s in self.sample.stop for length in range(1, len(s) + 1))
        if matched is None:
            matched = next((p for p in self.sample.stop_regex if re.search(p, tail)), None)
        return matched

    def _new_text(self, trim_last):
        end = max(len(self.ids) - 1, self.surr) if trim_last else len(self.ids)
        return self._decode(self.ids[self.surr:end])[len(self._decode(self.ids[self.surr:self.read])):]

    def running(self, output):
        """A detokenizer call, when the scheduler would hand the output over."""
        if self.sample.stream:
            due = chunk_due(len(output), self.sample.stream_interval) and not self.holds
        else:
            due = len(output) % FORCE_STREAM_INTERVAL == 0
        if not due:
            return
        new = self._new_text(False)
        pending = self.sent - len(self.committed)
        if new and not new.endswith("\ufffd"):
            self.emitted.append(new[pending:])
            self.committed += new
            self.surr, self.read = self.read, len(self.ids)
            self.sent = len(self.committed)
        else:
            printable = find_printable_text(new)
            self.emitted.append(printable[pending:])
            self.sent = len(self.committed) + len(printable)

    def finished(self, output, finish):
        """The last call: what was not yet emitted, without a trimmed stop id, cut at a matched stop string."""
        matched = finish.get("matched")
        no_stop_trim = self.sample.no_stop_trim
        out = self.committed + self._new_text(_is_int(matched) and not no_stop_trim)
        if isinstance(matched, str) and matched in out:
            at = out.index(matched)
            out = out[:at + len(matched) if no_stop_trim else at]
        self.emitted.append(out[self.sent:])
        return "".join(self.emitted)


def main(argv=None):
    """Command-line tool: print `json.dumps(model.generate(body))` for one request body."""
    parser = argparse.ArgumentParser(description="Answer a /generate request with the toy model of MODEL.md.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab-size", type=int, help="V (151936, or a loaded tokenizer's, section 13.2)")
    parser.add_argument("--tokenizer", metavar="PATH", help="a tokenizer.json or a model directory (section 13)")
    parser.add_argument("--stream-interval", type=int, default=1)
    parser.add_argument("--context-length", type=int, default=32768)
    parser.add_argument("--sglang-version", default="0.5.23", help="the release number the server answers as")
    parser.add_argument("--return-original-logprob", action="store_true")
    parser.add_argument("--enable-deterministic-inference", action="store_true")
    parser.add_argument("--script", metavar="FILE", help="JSON list of scripted answers (MODEL.md 8.4)")
    parser.add_argument("--enable-return-routed-experts", action="store_true")
    parser.add_argument("--num-hidden-layers", type=int, default=48)
    parser.add_argument("--num-experts", type=int, default=128)
    parser.add_argument("--num-experts-per-tok", type=int, default=8)
    parser.add_argument("--sampling-mask-max-tokens", type=int, default=4096)
    parser.add_argument("--slime-patches", action="store_true", help="slime's patched 0.5.15 (section 7.2)")
    parser.add_argument("--model-path", metavar="DIR", help="a toy policy directory whose weights serve (section 14)")
    parser.add_argument("body", nargs="?", default="-", help="request body as JSON, or - for stdin")
    args = parser.parse_args(argv)
    scripts = None
    if args.script:
        with open(args.script, encoding="utf-8") as f:
            scripts = json.load(f)
    model = ToyModel(seed=args.seed, vocab_size=args.vocab_size, context_length=args.context_length,
                     sglang_version=args.sglang_version, return_original_logprob=args.return_original_logprob,
                     scripts=scripts, deterministic_inference=args.enable_deterministic_inference,
                     enable_return_routed_experts=args.enable_return_routed_experts,
                     moe_shape=(args.num_hidden_layers, args.num_experts, args.num_experts_per_tok),
                     sampling_mask_max_tokens=args.sampling_mask_max_tokens, tokenizer=args.tokenizer,
                     stream_interval=args.stream_interval, slime_patches=args.slime_patches,
                     model_path=args.model_path)
    body = json.loads(sys.stdin.read() if args.body == "-" else args.body)
    print(json.dumps(model.generate(body)))


if __name__ == "__main__":
    main()
