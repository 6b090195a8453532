"""Checks sglang-mock's `stop_regex` against SGLang's own rules run with Python's `re`.

SGLang (0.5.15 and later) looks for each pattern after every token in the text of the output's tail window
(`Req._check_str_based_finish`, `srt/managers/schedule_batch.py`): `re.search(pattern, tail_str)`, where
`tail_str` decodes the last `min(max(stop_str_max_len, stop_regex_max_len) + 1, len(output_ids))` ids and
`stop_regex_max_len` is the largest `get_max_seq_length(pattern)` (`srt/sampling/sampling_params.py`). A match
finishes the request with `{"type": "stop", "matched": pattern}`, and the detokenizer cuts the text at the
pattern's first occurrence as a string, if it has one (`DetokenizerManager.trim_matched_stop`). A pattern that
`re` refuses escapes `normalize` as `re.error`: a 500 on `/generate`, and `Internal server error: <error>` on
the OpenAI routes.

This script runs those rules itself: `get_max_seq_length` executed from the wheel's source, `re` for the
search, and the server's `/detokenize` for the toy tokenizer's text. For each of a few greedy answers it
first asks the server for the answer without a pattern, then, for every pattern of a corpus (fixed
constructs, and literals cut from the answer's own text with anchors and look-arounds around them), computes
where SGLang would stop and what it would report, and asks the server with the pattern. Every answer must
agree in its status, finish reason, token count, ids and text (and, for a refused pattern, in the OpenAI
layer's message). It prints one summary line, `stop_regex: N patterns, M matched, R refused, A agree`, and
exits non-zero on any disagreement.

Usage:
    stop_regex_check.py --wheel WHEEL --url http://127.0.0.1:PORT [--seed S]
"""

import argparse
import json
import logging
import random
import re
import sys
import urllib.error
import urllib.request
import warnings
import zipfile

MAX_NEW_TOKENS = 24
MAX_STOP_REGEX_LEN = 256  # 0.5.23's bound on a pattern, in UTF-8 bytes

# Constructs the measure and the search treat differently: anchors (whose meaning depends on the window),
# Python's `$` and `\Z`, classes, bounded and unbounded repeats, look-around, back-references, flags, comments,
# literal braces, the empty pattern. `{w}` is a word of the answer, `{c}` one of its characters.
FIXED = [
    "",
    ".",
    "$",
    "^",
    r"\w+a\b",
    r"[aeiou]{3}",
    r"(?i)KA",
    r"a\Z",
    r"e$",
    r"(\w)\1",
    r"[^a]",
    r"[^a]{4}$",
    r"^, ",
    r"\s\w{2}\s",
    r"(?#comment)ba",
    r"ba{,2}",
    r"x{",
    r"a{,}b",
    r"(?:co|bu)\b",
    r"(?=ka)",
    r"(?<=o)b",
    r"(?<!a)c",
    r"\bto",
    r"^\w+$",
    r"(?P<v>[aeiou])(?P=v)",
    r"(k)?(?(1)a|b)",
    r"(?x) b a  # verbose",
    r"[[]",
    r"\d",
    r"q|z",
    r"(?m)^\w",
    r"[a-c]{2}\Z",
    r"{w}$",
    r"^{w}",
    r"(?<= ){w}",
    r"{w} ",
    r"{c}{c}",
    r"[{c}]\w\w",
]
# Patterns `re` refuses, each with its own error.
REFUSED = ["(", "a)", "*a", "a**", "[ab", r"a\z", "(?<n>a)", "a{2}{3}", "\\", "((b)", "x|*", "[]"]


def max_length_function(wheel):
    """`get_max_seq_length` as the wheel defines it, with the helpers it calls."""
    with zipfile.ZipFile(wheel) as whl:
        source = whl.read("sglang/srt/sampling/sampling_params.py").decode()
    start = source.index("def get_max_seq_length")
    # The measure warns of every construct it does not handle; the warnings are the wheel's, not findings.
    logger = logging.getLogger("sampling_params")
    logger.setLevel(logging.ERROR)
    namespace = {"logger": logger}
    exec("import re._parser as sre_parse\n" + source[start:], namespace)
    return namespace["get_max_seq_length"]


class Server:
    def __init__(self, url):
        self.url = url.rstrip("/")
        self.texts = {}

    def post(self, path, body):
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=60) as response:
            return response.read().decode()

    def decode(self, ids, skip_special_tokens):
        key = (tuple(ids), skip_special_tokens)
        if key not in self.texts:
            status, body = self.post(
                "/detokenize", {"tokens": list(ids), "skip_special_tokens": skip_special_tokens}
            )
            assert status == 200, (status, body)
            self.texts[key] = json.loads(body)["text"]
        return self.texts[key]


def generate(server, prompt, patterns=None):
    # Greedy, so that a running release answers the same ids with a pattern as without one.
    params = {"max_new_tokens": MAX_NEW_TOKENS, "temperature": 0, "ignore_eos": True}
    if patterns is not None:
        params["stop_regex"] = patterns
    return server.post("/generate", {"input_ids": prompt, "sampling_params": params})


def expected(server, ids, patterns, measure, length_first):
    """What SGLang answers for an answer `ids` with these patterns: (finish_reason, count, text). Before 0.5.23
    the length is checked first (`update_finish_state`), so the last token `max_new_tokens` allows is never
    searched; 0.5.23 checks the length last."""
    window = max(measure(p) for p in patterns) + 1
    last = len(ids) - 1 if length_first else len(ids)
    for count in range(1, last + 1):
        tail = server.decode(ids[count - min(window, count) : count], False)
        for pattern in patterns:
            if re.search(pattern, tail):
                text = server.decode(ids[:count], True)
                at = text.find(pattern)
                return {"type": "stop", "matched": pattern}, count, text if at == -1 else text[:at]
    return {"type": "length", "length": MAX_NEW_TOKENS}, len(ids), server.decode(ids, True)


def corpus(text, rng):
    words = [w for w in re.findall(r"\w+", text) if len(w) > 1]
    letters = sorted(set(c for c in text if c.isalpha()))
    patterns = []
    for template in FIXED:
        word = re.escape(rng.choice(words))
        letter = rng.choice(letters)
        patterns.append(template.replace("{w}", word).replace("{c}", letter))
    # Literals cut from the answer, as a client's stop pattern would name what the model says.
    for _ in range(8):
        start = rng.randrange(len(text))
        patterns.append(re.escape(text[start : start + rng.randint(1, 6)]))
    return patterns


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheel", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--seed", type=int, default=1976)
    args = parser.parse_args()
    # `[[]` is a literal `[` to Python, which warns that a later release may read it as a nested set.
    warnings.simplefilter("ignore", FutureWarning)
    measure = max_length_function(args.wheel)
    server = Server(args.url)
    release = tuple(int(n) for n in json.loads(server.get("/server_info"))["version"].split("."))
    length_first = release < (0, 5, 23)
    bounded = release >= (0, 5, 23)
    rng = random.Random(args.seed)
    total = matched = refused = agree = 0
    failures = []
    for prompt in [[1, 2, 3], [40, 41, 42, 43], [9], [500, 7]]:
        status, body = generate(server, prompt)
        assert status == 200, (status, body)
        answer = json.loads(body)
        ids = answer["output_ids"]
        cases = [[p] for p in corpus(answer["text"], rng)]
        # Several patterns: the first in order that matches names the finish.
        cases += [[rng.choice(FIXED[1:6]), p[0]] for p in cases[-4:]]
        for patterns in cases:
            total += 1
            status, body = generate(server, prompt, patterns)
            too_long = [p for p in patterns if len(p.encode()) > MAX_STOP_REGEX_LEN]
            got = {"status": status}
            if status == 200 and not (bounded and too_long):
                reply = json.loads(body)
                got.update(
                    finish=reply["meta_info"]["finish_reason"],
                    count=reply["meta_info"]["completion_tokens"],
                    ids=reply["output_ids"],
                    text=reply["text"],
                )
            if bounded and too_long:
                # 0.5.23's `normalize`: a pattern over 256 bytes is a `ValueError`.
                got = {"status": status, "body": body}
                length = len(too_long[0].encode())
                message = f"stop_regex is {length} bytes, over the {MAX_STOP_REGEX_LEN}-byte limit"
                want = {"status": 400, "body": json.dumps({"error": {"message": message}}, separators=(",", ":"))}
            else:
                finish, count, text = expected(server, ids, patterns, measure, length_first)
                want = {"status": 200, "finish": finish, "count": count, "ids": ids[:count], "text": text}
                matched += finish["type"] == "stop"
            if got == want:
                agree += 1
            else:
                failures.append((patterns, want, got, body[:200]))
    for pattern in REFUSED:
        total += 1
        refused += 1
        try:
            re.compile(pattern)
            failures.append(([pattern], "re refuses it", "re compiled it", ""))
            continue
        except re.error as err:
            message = f"Internal server error: {err}"
        status, body = generate(server, [1, 2, 3], [pattern])
        openai_status, openai_body = server.post(
            "/v1/completions", {"model": "m", "prompt": [1, 2, 3], "max_tokens": 4, "stop_regex": pattern}
        )
        want = (500, "Internal Server Error", 500, message)
        got = (status, body, openai_status, json.loads(openai_body).get("message"))
        if got == want:
            agree += 1
        else:
            failures.append(([pattern], want, got, ""))
    for failure in failures:
        print("DISAGREE", json.dumps(failure, ensure_ascii=False))
    print(f"stop_regex: {total} patterns, {matched} matched, {refused} refused, {agree} agree")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
