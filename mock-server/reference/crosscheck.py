#!/usr/bin/env python3
"""Checks a running sglang-mock against the independent reference model (``toymodel.py``, written from MODEL.md).

Two checks, with the standard library only for the toy tokenizer:

* **Replay.** Random ``/generate`` requests (greedy and T in {0.01, 0.7, 1, 1.3}; top-k, top-p, min-p;
  ``min_new_tokens``, ``ignore_eos``, stop strings and stop ids; ``logprob_start_len`` 0; ``top_logprobs_num`` up
  to 20; ``token_ids_logprob``; ``n > 1``; batches; scripted answers; streamed and not) must come back with the
  reference's ``output_ids``, text and finish reason, and every logprob within ``max(1e-5, 1e-6 * |value|)``.
* **Frequencies.** For fixed contexts and filters, the first token of 4,000 seeded samples must follow the
  reference's filtered distribution (chi-square, p > 0.001), and each draw must be the reference's own draw.

Usage: ``crosscheck.py --url http://127.0.0.1:PORT --server-seed 7 --script FILE --sglang-version 0.5.23
[--tokenizer PATH] [--model-path DIR]`` (the server must run with the same seed, vocabulary or tokenizer, script
file, release and weights).
Exits non-zero with a report of every mismatch. With ``--tokenizer`` it needs Hugging Face's ``tokenizers``
package, the random requests add multi-byte stop strings and streams with a ``stream_interval``, and the texts
compared are those of SGLang's incremental detokenizer (MODEL.md 13.4).
"""

import argparse
import json
import math
import os
import random
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import toymodel  # noqa: E402

# The rules of the script file the server is started with contain these phrases; random prompts never do.
SCRIPTED_PHRASES = ("Judgment", "count to three")
# The wire of the releases before 0.5.15: a non-finite logprob fails a whole non-streamed answer with a plain 500
# (Starlette's allow_nan=False), streamed output_ids are deltas, and output_ids start with the detokenizer's
# window of the prompt (VERSIONS.md, decode_window_ids).
WIRE_SINCE = (0, 5, 15)
# The most prompt ids that window holds (INIT_INCREMENTAL_DETOKENIZATION_OFFSET in SGLang 0.5.3).
DECODE_WINDOW = 5


def post(url, body, old_wire=False):
    """POSTs a JSON body to ``url`` and returns the parsed answer: for a stream, its last data event. On the old
    wire the ``output_ids`` of every event are joined (0.5.3 sends each chunk's new ids only), and the window of
    ``min(prompt_tokens, 5)`` prompt ids before the output is taken off, so that ``output_ids`` are the
    generated ids."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            raw = response.read().decode()
    except urllib.error.HTTPError as e:
        raise AssertionError(f"HTTP {e.code} {e.read().decode()[:300]} for {json.dumps(body)[:300]}") from None
    if not body.get("stream"):
        answer = json.loads(raw)
        if old_wire:
            for item in answer if isinstance(answer, list) else [answer]:
                drop_window(item)
        return answer
    events = [line[len("data: "):] for line in raw.split("\n\n") if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        raise AssertionError(f"stream did not end with [DONE]: {raw[-200:]!r}")
    chunks = [json.loads(event) for event in events[:-1]]
    last = chunks[-1]
    if old_wire:
        last["output_ids"] = [token for chunk in chunks for token in chunk["output_ids"]]
        drop_window(last)
    return last


def drop_window(item):
    """Takes the detokenizer's window (the prompt's last ids) off the front of an old-wire item's output_ids."""
    window = min(item["meta_info"]["prompt_tokens"], DECODE_WINDOW)
    item["output_ids"] = item["output_ids"][window:]


def post_status(url, body):
    """POSTs a JSON body to ``url`` and returns the status and the body's text, whatever the status."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


# --------------------------------------------------------------------------------------------------------------
# Random requests


def random_word(rng):
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    return "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(1, 3)))


def random_text(rng):
    """A prompt mixing the model's word pieces, bytes, multi-byte characters, combining marks, whitespace runs and
    chat-template markers."""
    parts = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.random()
        if kind < 0.55:
            parts.append(" " + random_word(rng))
        elif kind < 0.7:
            parts.append(rng.choice(["The", " capital", " of", " France", " is", "2+2=", " Hello", "!"]))
        elif kind < 0.8:
            parts.append(rng.choice(["é", "日本", " wörld", "\n", "🙂", "e\u0301", "  \t ", "👩‍💻",
                                     "<tool_call>"]))
        elif kind < 0.9:
            parts.append(rng.choice(["<|im_start|>user\n", "<|im_end|>\n", "<|im_start|>assistant\n"]))
        else:
            parts.append(rng.choice(["<|im_", "<", "|>", "A1"]))
    return "".join(parts) or "x"


def special_ids(model):
    """Ids a prompt may hold beside ordinary ones: the toy's three special tokens, or a loaded tokenizer's
    end-of-sequence and special ids and an id past its tokens, which has no text (MODEL.md 13.2)."""
    vocab = model.vocab
    if not model.loaded:
        return [vocab.vocab_size - 3, vocab.vocab_size - 2, vocab.vocab_size - 1]
    return sorted(set(vocab.end_of_sequence_ids).union(vocab.special_ids)) + [vocab.vocab_size - 1]


def random_ids(rng, model):
    """A prompt of ids: bytes (in a byte-level BPE, ids that may end inside a character), any id, special ids."""
    specials = special_ids(model)
    ids = []
    for _ in range(rng.randint(1, 12)):
        kind = rng.random()
        if kind < 0.2:
            ids.append(rng.randrange(256))
        elif kind < 0.9:
            ids.append(rng.randrange(256, model.vocab_size))
        else:
            ids.append(rng.choice(specials))
    return ids


def random_sampling(rng, model, coverage):
    params = {"max_new_tokens": rng.choice([1, 2, 5, 16, 32, 64, 64, 200])}
    temperature = rng.choice([0, 0.01, 0.7, 1.0, 1.0, 1.3])
    if temperature != 1.0 or rng.random() < 0.5:
        params["temperature"] = temperature
    coverage.add("greedy" if temperature == 0 else f"T={temperature}")
    if rng.random() < 0.3:
        params["top_k"] = rng.choice([1, 3, 8, 9, 20, -1])
        coverage.add("top_k")
    if rng.random() < 0.3:
        params["top_p"] = rng.choice([0.3, 0.8, 0.95, 0.999999])
        coverage.add("top_p")
    if rng.random() < 0.3:
        params["min_p"] = rng.choice([1e-7, 1e-3, 0.05, 0.3])
        coverage.add("min_p")
    if rng.random() < 0.2:
        params["min_new_tokens"] = rng.randint(0, params["max_new_tokens"])
        coverage.add("min_new_tokens")
    if rng.random() < 0.2:
        params["ignore_eos"] = True
        coverage.add("ignore_eos")
    if rng.random() < 0.25:
        params["stop"] = rng.choice(["a", "ka", "e b", ". ", "!"]) if rng.random() < 0.5 else [
            rng.choice(["zu", "no", "ti"]),
            rng.choice(["a ", "o", ","]),
        ]
        if model.loaded and rng.random() < 0.5:
            # Over a real vocabulary: stop strings of several characters and tokens, and multi-byte ones.
            params["stop"] = [rng.choice(["的", "。", "é", "ing", "\n", "er ", "tion"]),
                              rng.choice(["the", "们", ", "])]
        coverage.add("stop")
    if rng.random() < 0.25:
        # The punctuation ids the model proposes: frequent enough that stop ids on them end many answers.
        params["stop_token_ids"] = rng.sample(sorted(set(model.vocab.punctuation_ids)), rng.randint(1, 3))
        coverage.add("stop_token_ids")
    if model.sglang_version >= (0, 5, 15) and rng.random() < 0.2:
        # Patterns whose tail window, anchors and look-arounds matter (MODEL.md 8.2 and 9, check 6.3).
        patterns = ["a\\b", "[aeiou]{2}", "^\\w", "k.$", "\\w+o ", "(?<=b)a", "\\.", "ba|ko", "[^a]{3}$", "ti"]
        params["stop_regex"] = rng.choice(patterns) if rng.random() < 0.5 else rng.sample(patterns, 2)
        coverage.add("stop_regex")
    if rng.random() < 0.15:
        params["no_stop_trim"] = True
    if rng.random() < 0.15:
        params["skip_special_tokens"] = False
    if rng.random() < 0.4:
        params["sampling_seed"] = rng.randint(-(2**40), 2**40)
        coverage.add("sampling_seed")
    return params


def random_request(rng, model, coverage):
    """One random /generate body, and the coverage tags it exercises."""
    body = {}
    shape = rng.random()
    scripted = rng.random() < 0.1
    if shape < 0.2:
        prompts = [random_text(rng) for _ in range(rng.randint(2, 3))]
        body["text"] = prompts
        coverage.add("batch")
    elif shape < 0.35:
        body["input_ids"] = [random_ids(rng, model) for _ in range(rng.randint(2, 3))]
        coverage.add("batch")
    elif shape < 0.65:
        body["input_ids"] = random_ids(rng, model)
    else:
        body["text"] = random_text(rng)
    if scripted:
        phrase = rng.choice(SCRIPTED_PHRASES)
        if "text" in body:
            body["text"] = [t + phrase for t in body["text"]] if isinstance(body["text"], list) else (
                body["text"] + phrase
            )
        else:
            body["text"] = " please " + phrase
            body.pop("input_ids")
        coverage.add("scripted")
    sampling = random_sampling(rng, model, coverage)
    if rng.random() < 0.15:
        sampling["n"] = rng.randint(2, 3)
        coverage.add("n>1")
    body["sampling_params"] = sampling
    if rng.random() < 0.85:
        body["return_logprob"] = True
        coverage.add("return_logprob")
        if rng.random() < 0.4:
            body["logprob_start_len"] = 0
            coverage.add("logprob_start_len=0")
        if rng.random() < 0.4:
            body["top_logprobs_num"] = rng.randint(1, 20)
            coverage.add("top_logprobs_num")
        if rng.random() < 0.3:
            body["token_ids_logprob"] = rng.sample(range(model.vocab_size), 2) + [model.vocab.end_of_turn]
            coverage.add("token_ids_logprob")
        if rng.random() < 0.3:
            body["return_text_in_logprobs"] = True
    if rng.random() < 0.3:
        # Section 12: the rows from a start within every prompt (the shortest has at least one token).
        body["return_routed_experts"] = True
        if rng.random() < 0.5:
            body["routed_experts_start_len"] = rng.randint(0, 1)
        coverage.add("routed_experts")
    if rng.random() < 0.25:
        # Section 7.1: a mask needs greedy sampling or a bounded top_k.
        body["return_sampling_mask"] = True
        if sampling.get("temperature") == 0.01:
            # Cold: the tail and most explicit entries have no weight, and the support leaves them out.
            sampling["top_k"] = rng.choice([20, 50])
            coverage.add("sampling_mask at T=0.01")
        elif sampling.get("temperature") != 0:
            sampling["top_k"] = rng.choice([2, 3, 8, 9, 20, 50])
        if rng.random() < 0.5:
            body["sampling_logprobs_mode"] = rng.choice(["selected", "support"])
        coverage.add("sampling_mask")
    if model.slime_patches and rng.random() < 0.3:
        # Section 7.2: rows need logprobs and a filter; without either the patch reports nothing.
        sampling["custom_params"] = {"return_top_p_token_ids": True}
        if rng.random() < 0.8:
            body["return_logprob"] = True
            if "top_p" not in sampling and "top_k" not in sampling and rng.random() < 0.7:
                sampling["top_p"] = rng.choice([0.5, 0.8, 0.95])
        coverage.add("top_p_rows")
    single = isinstance(body["text"], str) if "text" in body else not isinstance(body["input_ids"][0], list)
    if single and sampling.get("n", 1) == 1 and rng.random() < 0.2:
        body["stream"] = True
        coverage.add("stream")
        if model.loaded and rng.random() < 0.5:
            # MODEL.md 13.4: the text depends on when the detokenizer runs, which the chunk schedule decides.
            sampling["stream_interval"] = rng.choice([2, 3, 8])
            coverage.add("stream_interval")
    return body


# --------------------------------------------------------------------------------------------------------------
# Comparison


def close(got, want):
    return abs(got - want) <= max(1e-5, 1e-6 * abs(want))


def is_triple(entry):
    """Whether ``entry`` is one ``[logprob, id, text]`` triple rather than a list of them."""
    return len(entry) == 3 and not isinstance(entry[0], list) and isinstance(entry[1], int)


def compare_entries(where, got, want, problems):
    """Compares logprob lists: triples, lists of triples, or (top lists) lists of those with ``None`` positions."""
    if got is None or want is None:
        if got is not want:
            problems.append(f"{where}: {got!r} vs reference {want!r}")
    elif is_triple(want):
        if not isinstance(got, list) or len(got) != 3 or got[1:] != want[1:]:
            problems.append(f"{where}: {got!r} vs reference {want!r}")
        elif (got[0] is None) != (want[0] is None):
            problems.append(f"{where}: logprob {got[0]!r} vs reference {want[0]!r}")
        elif got[0] is not None and not close(got[0], want[0]):
            problems.append(f"{where}: logprob {got[0]!r} vs reference {want[0]!r}")
    elif not isinstance(got, list) or len(got) != len(want):
        problems.append(f"{where}: {len(got) if isinstance(got, list) else got!r} entries, reference {len(want)}")
    else:
        for index, (g, w) in enumerate(zip(got, want)):
            compare_entries(f"{where}[{index}]", g, w, problems)


LOGPROB_KEYS = (
    "input_token_logprobs",
    "output_token_logprobs",
    "input_top_logprobs",
    "output_top_logprobs",
    "input_token_ids_logprobs",
    "output_token_ids_logprobs",
)


def compare(name, got, want, problems):
    """Compares one server answer item with the reference's; returns the number of logprob values compared."""
    for key in ("output_ids", "text"):
        if got.get(key) != want[key]:
            problems.append(f"{name}: {key} {got.get(key)!r} vs reference {want[key]!r}")
            return 0
    meta = got.get("meta_info", {})
    for key in ("finish_reason", "prompt_tokens", "completion_tokens"):
        if meta.get(key) != want[key]:
            problems.append(f"{name}: {key} {meta.get(key)!r} vs reference {want[key]!r}")
    for key in ("routed_experts", "output_token_sampling_mask", "output_token_sampling_mask_length",
                "top_p_token_ids", "top_p_token_offsets"):
        if meta.get(key) != want.get(key):
            problems.append(f"{name}: {key} {str(meta.get(key))[:200]} vs reference {str(want.get(key))[:200]}")
    compared = 0
    if (mask_logprobs := want.get("output_token_sampling_logprobs")) is not None:
        got_logprobs = meta.get("output_token_sampling_logprobs")
        flat = lambda values: [v for row in values for v in (row if isinstance(row, list) else [row])]  # noqa: E731
        if not isinstance(got_logprobs, list) or len(flat(got_logprobs)) != len(flat(mask_logprobs)):
            problems.append(f"{name}: output_token_sampling_logprobs {str(got_logprobs)[:200]} vs reference "
                            f"{str(mask_logprobs)[:200]}")
        else:
            for g, w in zip(flat(got_logprobs), flat(mask_logprobs)):
                if (g is None) != (w is None) or (w is not None and not close(g, w)):
                    problems.append(f"{name}: sampling logprob {g!r} vs reference {w!r}")
                    break
            compared += len(flat(mask_logprobs))
    elif "output_token_sampling_logprobs" in meta:
        problems.append(f"{name}: output_token_sampling_logprobs the reference does not have")
    for key in LOGPROB_KEYS:
        if (key in meta) != (key in want):
            problems.append(f"{name}: {key} present {key in meta} vs reference {key in want}")
        elif key in want:
            compare_entries(f"{name} {key}", meta[key], want[key], problems)
            compared += sum(1 for _ in flat_values(want[key]))
    return compared


def flat_values(entries):
    """Every logprob value of a logprob list, however nested."""
    for entry in entries:
        if entry is None:
            continue
        if is_triple(entry):
            yield entry[0]
        else:
            yield from flat_values(entry)


def has_infinite_logprob(item):
    """Whether a reference item reports a -inf logprob (``None``; the first input position is always ``None``)."""
    for key in LOGPROB_KEYS:
        entries = item.get(key) or []
        if key == "input_token_logprobs":
            entries = entries[1:]
        if any(value is None for value in flat_values(entries)):
            return True
    return False


def replay(args, model, problems):
    rng = random.Random(args.seed)
    coverage = set()
    samples = logprobs = 0
    for number in range(args.requests):
        body = random_request(rng, model, coverage)
        want = model.generate(body)
        old_wire = model.sglang_version < WIRE_SINCE
        if old_wire and not body.get("stream") and any(map(has_infinite_logprob, want)):
            # MODEL.md 8.5: a -inf logprob fails a whole non-streamed 0.5.3 answer.
            status, text = post_status(args.url + "/generate", body)
            if (status, text) != (500, "Internal Server Error"):
                problems.append(f"request {number}: want 0.5.3's plain 500 for a -inf logprob, got {status} "
                                f"{text[:200]!r}: {json.dumps(body)}")
            coverage.add("0.5.3 non-finite 500")
            continue
        got = post(args.url + "/generate", body, old_wire=model.sglang_version < WIRE_SINCE)
        items = got if isinstance(got, list) else [got]
        if len(items) != len(want):
            problems.append(f"request {number}: {len(items)} items vs reference {len(want)}: {json.dumps(body)}")
            continue
        before = len(problems)
        for index, (g, w) in enumerate(zip(items, want)):
            logprobs += compare(f"request {number} item {index}", g, w, problems)
            samples += 1
            finish = w["finish_reason"]
            coverage.add(f"finish:{finish['type']}:{type(finish.get('matched', 0)).__name__}")
            params = body.get("sampling_params")
            patterns = params.get("stop_regex", []) if isinstance(params, dict) else []
            if finish.get("matched") in ([patterns] if isinstance(patterns, str) else patterns):
                coverage.add("finish:stop:regex")
        if len(problems) > before:
            problems.append(f"request {number} was: {json.dumps(body)}")
    if model.loaded:
        samples += split_characters(args, model, rng, coverage, problems)
    wanted = {
        "greedy", "T=0.01", "T=0.7", "T=1.0", "T=1.3", "top_k", "top_p", "min_p", "min_new_tokens", "ignore_eos",
        "stop", "stop_token_ids", "logprob_start_len=0", "top_logprobs_num", "token_ids_logprob", "n>1", "batch",
        "scripted", "stream", "finish:length:int", "finish:stop:int", "finish:stop:str", "routed_experts",
        "sampling_mask", "sampling_mask at T=0.01",
    } | ({"top_p_rows"} if model.slime_patches else set()) | (
        {"stop_regex", "finish:stop:regex"} if model.sglang_version >= (0, 5, 15) else set()) | ({"stream_interval", "split character"} if model.loaded else set())
    missing = sorted(wanted - coverage)
    if missing:
        problems.append(f"the random requests never exercised {missing}; raise --requests or change --seed")
    print(f"replay: {args.requests} requests, {samples} samples, {logprobs} logprobs compared")


def split_characters(args, model, rng, coverage, problems):
    """Over a loaded tokenizer: prompts that end inside a UTF-8 character, where the greedy answer's first id
    brings more bytes. There SGLang's detokenizer text is not ``decode(output_ids)`` (MODEL.md 13.4: the
    surrogate ids' text is subtracted whole), and random requests almost never get there; the reference finds
    such prompts by search. Returns the number of samples compared."""
    vocab = model.vocab
    partial = [token for token in range(256) if vocab.decode([token]) == "\ufffd"]
    prompts = []
    for _ in range(200_000):
        if len(prompts) == 8:
            break
        prompt = random_ids(rng, model)[:6] + [rng.choice(partial)]
        first = model.distribution(prompt, 1.0).top(1)[0][0]
        tail = prompt[-5:]
        if vocab.decode(tail + [first])[len(vocab.decode(tail)):] != vocab.decode([first]):
            prompts.append(prompt)
    if len(prompts) < 8:
        problems.append(f"found {len(prompts)} prompts that end inside a character, not 8")
    differing = 0
    for number, prompt in enumerate(prompts):
        body = {"input_ids": prompt, "return_logprob": True, "stream": number % 2 == 1,
                "sampling_params": {"temperature": 0, "max_new_tokens": 6}}
        [want] = model.generate(body)
        differing += want["text"] != vocab.decode(want["output_ids"])
        got = post(args.url + "/generate", body, old_wire=model.sglang_version < WIRE_SINCE)
        before = len(problems)
        compare(f"split character {number}", got, want, problems)
        if len(problems) > before:
            problems.append(f"split character {number} was: {json.dumps(body)}")
    if prompts and not differing:
        problems.append("no split-character answer has a text other than decode(output_ids): the case tests nothing")
    coverage.add("split character")
    print(f"split characters: {len(prompts)} prompts, {differing} texts other than decode(output_ids)")
    return len(prompts)


# --------------------------------------------------------------------------------------------------------------
# Frequencies


def chi_square_p_value(statistic, dof):
    """P(X >= statistic) for X ~ chi-square(dof): the regularised upper incomplete gamma Q(dof/2, statistic/2)."""
    a, x = dof / 2.0, statistic / 2.0
    if x <= 0:
        return 1.0
    log_prefactor = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:  # the series for P, then Q = 1 - P
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-15:
            n += 1
            term *= x / n
            total += term
        return max(0.0, 1.0 - total * math.exp(log_prefactor))
    # Lentz's continued fraction for Q.
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    i = 1
    while True:
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
        i += 1
    return math.exp(log_prefactor) * h


def tail_rank(token_id, excluded):
    """The rank of a tail id among the tail ids: how many ids below it are in the tail."""
    return token_id - sum(1 for e in excluded if e < token_id)


# Contexts and filters for the frequency test. The first two are the exact cases of the issue that found the
# vocabulary order broken (server seed 7); top-k at 8 sits at the boundary of the explicit entries.
FREQUENCY_CASES = [
    {"name": "issue min-p, T=1.3", "input_ids": [30726, 94818, 48746, 18976],
     "sampling": {"temperature": 1.3, "min_p": 4.04e-6}},
    {"name": "issue top list, T=1", "input_ids": [95524, 48769, 111243, 8866, 10, 96964, 72476],
     "sampling": {"temperature": 1.0}},
    {"name": "top-k 8, T=0.7", "input_ids": [72, 101, 108, 343, 422, 114, 108, 100],
     "sampling": {"temperature": 0.7, "top_k": 8}},
    {"name": "top-p 0.9 into the tail, T=1.3", "input_ids": [151644, 872, 198, 3838, 374],
     "sampling": {"temperature": 1.3, "top_p": 0.9}},
    {"name": "min-p 0.05, T=1", "input_ids": [1000, 2000, 3000],
     "sampling": {"temperature": 1.0, "min_p": 0.05}},
    {"name": "top-k 3 top-p 0.8 min_new_tokens, T=0.7", "input_ids": [5, 6, 7, 8],
     "sampling": {"temperature": 0.7, "top_k": 3, "top_p": 0.8, "min_new_tokens": 1}},
]


def frequencies(args, model, problems):
    for case in FREQUENCY_CASES:
        sampling = dict(case["sampling"], max_new_tokens=1)
        ids = case["input_ids"]
        seeds = range(args.draws)
        body = {
            "input_ids": [ids] * args.draws,
            "sampling_params": [dict(sampling, sampling_seed=seed) for seed in seeds],
        }
        answers = post(args.url + "/generate", body, old_wire=model.sglang_version < WIRE_SINCE)
        drawn = [answer["output_ids"][0] for answer in answers]
        replayed = [item["output_ids"][0] for item in model.generate(body)]
        mismatched = sum(1 for a, b in zip(drawn, replayed) if a != b)
        if mismatched:
            problems.append(f"{case['name']}: {mismatched} of {args.draws} draws differ from the reference's")

        masked = sorted(model.end_of_sequence_ids) if sampling.get("min_new_tokens") else []
        dist = model.distribution(ids, sampling["temperature"], masked)
        explicit, kept_tail, tail_p = dist.filtered(sampling.get("top_k"), sampling.get("top_p", 1.0),
                                                    sampling.get("min_p", 0.0))
        expected = {token: p * args.draws for token, p in explicit}
        counts = dict.fromkeys(expected, 0)
        tail_count = 0
        excluded = sorted(set(dist_explicit_ids(dist)) | set(masked))
        for token in drawn:
            if token in counts:
                counts[token] += 1
            elif token not in excluded and kept_tail and tail_rank(token, excluded) < kept_tail:
                tail_count += 1
            else:
                problems.append(f"{case['name']}: drew {token}, which the filters remove")
                break
        bins = [(counts[t], expected[t]) for t in expected]
        if kept_tail:
            bins.append((tail_count, kept_tail * tail_p * args.draws))
        # Bins expected fewer than 5 times are pooled, as the chi-square approximation needs.
        pooled = [b for b in bins if b[1] >= 5]
        rest = [b for b in bins if b[1] < 5]
        if rest:
            pooled.append((sum(b[0] for b in rest), sum(b[1] for b in rest)))
        if len(pooled) < 2:
            problems.append(f"{case['name']}: fewer than two bins with enough mass to test")
            continue
        statistic = sum((seen - want) ** 2 / want for seen, want in pooled)
        p = chi_square_p_value(statistic, len(pooled) - 1)
        tail_note = f", tail {tail_count} (expected {kept_tail * tail_p * args.draws:.1f})" if kept_tail else ""
        print(f"frequencies: {case['name']}: {len(pooled)} bins, chi2 {statistic:.2f}, p {p:.4f}{tail_note}")
        if not p > 0.001:
            problems.append(f"{case['name']}: chi-square {statistic:.2f} on {len(pooled) - 1} dof, p = {p:.2e}")


def dist_explicit_ids(dist):
    """The ids of the unmasked explicit entries: every id of the top 9 above the tail. The tenth id of the sorted
    order is always a tail id, since there are at most nine explicit entries."""
    tail_logprob = dist.top(10)[-1][1]
    return [token for token, logprob in dist.top(9) if logprob > tail_logprob]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="base URL of a running sglang-mock")
    parser.add_argument("--server-seed", type=int, default=0, help="the server's --seed")
    parser.add_argument("--vocab-size", type=int, help="the server's --vocab-size, when it gives one")
    parser.add_argument("--tokenizer", metavar="PATH", help="the server's --tokenizer (MODEL.md 13)")
    parser.add_argument("--script", help="the server's --script file")
    parser.add_argument("--sglang-version", default="0.5.23", help="the server's --sglang-version (a release number)")
    parser.add_argument("--enable-deterministic-inference", action="store_true",
                        help="the server runs with --enable-deterministic-inference")
    parser.add_argument("--enable-return-routed-experts", action="store_true",
                        help="the server runs with --enable-return-routed-experts")
    parser.add_argument("--slime-patches", action="store_true",
                        help="the server runs with --slime-patches (MODEL.md 7.2: top-p replay)")
    parser.add_argument("--moe-shape", default="48,128,8",
                        help="the server's --num-hidden-layers, --num-experts, --num-experts-per-tok")
    parser.add_argument("--model-path", metavar="DIR",
                        help="the server's --model-path, when it is a toy policy directory (MODEL.md 14)")
    parser.add_argument("--requests", type=int, default=240, help="random requests to replay")
    parser.add_argument("--draws", type=int, default=4000, help="seeded draws per frequency case (0: none)")
    parser.add_argument("--seed", type=int, default=1976, help="seed of the random requests")
    args = parser.parse_args()
    args.url = args.url.rstrip("/")
    scripts = json.load(open(args.script)) if args.script else None
    model = toymodel.ToyModel(seed=args.server_seed, vocab_size=args.vocab_size, sglang_version=args.sglang_version,
                              scripts=scripts, deterministic_inference=args.enable_deterministic_inference,
                              enable_return_routed_experts=args.enable_return_routed_experts,
                              moe_shape=tuple(int(x) for x in args.moe_shape.split(",")), tokenizer=args.tokenizer,
                              slime_patches=args.slime_patches, model_path=args.model_path)
    if args.model_path is not None and model.policy is None:
        print(f"{args.model_path} holds no toy policy", file=sys.stderr)
        return 1
    problems = []
    replay(args, model, problems)
    if args.draws > 0:
        frequencies(args, model, problems)
    for problem in problems[:60]:
        print("MISMATCH", problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problems", file=sys.stderr)
        return 1
    print("the server agrees with the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
