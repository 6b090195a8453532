#!/usr/bin/env python3
"""Checks a running sglang-mock with a loaded tokenizer (``--tokenizer PATH``) against what a trainer computes
with the same files: Hugging Face's ``tokenizers`` library for ids and text, and transformers'
``apply_chat_template`` for chat prompts. The server must run with ``--tokenizer PATH`` and the SGLang release
given here (0.5.15 or later: ``/tokenize`` and ``/detokenize`` are served from 0.5.15).

The checks (each names what differs, and the script exits non-zero after listing every mismatch):

* **Encoding.** Every line of the corpus (with and without its line ending) and the whole corpus: ``/tokenize``
  and ``/v1/tokenize``, one prompt or a batch, with and without ``add_special_tokens``, give the library's ids
  (``Tokenizer.encode``), and transformers' ``AutoTokenizer`` gives the same ids, so the files are what a
  trainer loads.
* **Decoding.** ``/detokenize`` and ``/v1/detokenize`` of each line's ids and of random id lists (bytes that
  split characters, special and added tokens, ids past the tokenizer's that have no text), one list or a batch,
  with and without ``skip_special_tokens``: the library's ``decode``.
* **Generated text.** ``/generate`` over the corpus' lines (random temperatures, ``skip_special_tokens`` both
  ways, ``ignore_eos`` with special ids allowed): ``text`` is the library's decoding of ``output_ids`` (without
  the stop id that ends an answer), and each ``return_text_in_logprobs`` text is ``decode([id])``.
* **Chat templates.** For conversations with system prompts, several turns, tools, tool calls (arguments as
  objects and as JSON strings), consecutive tool results, text parts, ``tool_choice`` and
  ``chat_template_kwargs``: ``/tokenize`` with ``messages`` gives the ids of transformers' rendering, and those
  ids decode to the rendering byte for byte. The messages are first normalised as SGLang does before it calls
  ``apply_chat_template`` (MODEL.md 13.5); the decoded text is the rendering in NFC, as the tokenizer's normaliser
  writes it. An assistant tool call whose arguments are not JSON is a 400.
* **Streams.** ``/generate`` and ``/v1/completions`` streamed: each streamed text is a prefix of the next and the
  chunks reassemble to the non-streamed text, for answers cut where their last id ends inside a character too.

Usage: ``tokenizer_check.py --url http://127.0.0.1:PORT --tokenizer PATH [--corpus FILE] [--sglang-version V]``.
Needs ``tokenizers`` and ``transformers`` (which renders with ``jinja2``).
"""

import argparse
import copy
import json
import os
import random
import sys
import unicodedata
import urllib.error
import urllib.request
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # before transformers is imported
import tokenizers  # noqa: E402
import transformers  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
DEFAULT_CORPUS = DATA / "tokenizer_corpus.txt"

# The tools of the conversations, shared with scripts/check_qwen_tokenizer.py.
WEATHER_TOOL, TIME_TOOL = json.loads((DATA / "chat_tools.json").read_text(encoding="utf-8"))

# (name, request fields beside messages); every conversation is rendered with and without the generation prompt
# under 0.5.23, which honours `add_generation_prompt` on /tokenize.
CONVERSATIONS = [
    ("one user message", {"messages": [{"role": "user", "content": "Hello, 世界! 🙂"}]}),
    ("a system prompt and several turns", {"messages": [
        {"role": "system", "content": "You are terse.\nAnswer in one line."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "  4\n"},
        {"role": "user", "content": "And café + résumé?"},
        {"role": "assistant", "content": "Both French.<|im_end|>"},
        {"role": "user", "content": "Thanks."},
    ]}),
    ("tools, tool calls with string and object arguments, two tool results in a row", {
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "messages": [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": "Weather and time in Paris?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":   \"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": {}}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18°C, cloudy"},
            {"role": "tool", "tool_call_id": "call_2", "content": "14:05"},
            {"role": "assistant", "content": "It is 18°C and cloudy; the time is 14:05."},
            {"role": "user", "content": "Merci."},
        ]}),
    ("tools without a system prompt, a tool call without content, ending on a tool result", {
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"unit\": \"°C\"}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "-3°C, snow"},
        ]}),
    ("content as text parts", {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be kind."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]},
    ]}),
    ("a named tool_choice keeps only its tool", {
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "get_time"}},
        "messages": [{"role": "user", "content": "What time is it?"}]}),
    ("tool_choice none leaves the tools out", {
        "tools": [WEATHER_TOOL], "tool_choice": "none",
        "messages": [{"role": "user", "content": "Weather in Rome?"}]}),
    ("chat_template_kwargs reach the template", {
        "chat_template_kwargs": {"bos_token": "<|endoftext|>"},
        "messages": [{"role": "user", "content": "Hi"}]}),
    ("whitespace, CJK and emoji in every role", {"messages": [
        {"role": "system", "content": "  \t系统  "},
        {"role": "user", "content": "👨‍👩‍👧‍👦\n\n\n  e\u0301"},
        {"role": "assistant", "content": "\n日本語\n"},
        {"role": "user", "content": "한국어"},
    ]}),
]


class Server:
    def __init__(self, url):
        self.url = url.rstrip("/")

    def post(self, path, body):
        """(status, parsed JSON or text) of a POST."""
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status, raw = response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read().decode()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw

    def ok(self, path, body):
        status, answer = self.post(path, body)
        if status != 200:
            raise AssertionError(f"{path} answered {status} {str(answer)[:300]} for {json.dumps(body)[:300]}")
        return answer

    def stream(self, path, body):
        """The parsed data events of a streamed POST, without the final [DONE]."""
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            raw = response.read().decode()
        events = [line[len("data: "):] for line in raw.split("\n\n") if line.startswith("data: ")]
        if not events or events[-1] != "[DONE]":
            raise AssertionError(f"{path}: the stream did not end with [DONE]: {raw[-200:]!r}")
        return [json.loads(event) for event in events[:-1]]


class Check:
    def __init__(self, server, tokenizer_path, corpus, sglang_version, seed):
        self.server = server
        self.library = tokenizers.Tokenizer.from_file(os.path.join(tokenizer_path, "tokenizer.json"))
        self.library.no_truncation()
        self.library.no_padding()
        self.auto = transformers.AutoTokenizer.from_pretrained(tokenizer_path)
        # The model's V, as the server takes it without --vocab-size (MODEL.md 13.2): ids up to it decode.
        config = Path(tokenizer_path, "config.json")
        self.vocab_size = (json.loads(config.read_text()).get("vocab_size") if config.exists() else None) or (
            self.library.get_vocab_size(with_added_tokens=True))
        text = Path(corpus).read_text(encoding="utf-8")
        self.corpus = text
        self.lines = [line for line in text.splitlines(keepends=True) if line.strip()]
        self.sglang_version = sglang_version
        self.rng = random.Random(seed)
        self.problems = []
        self.counts = {}

    def expect(self, what, got, want):
        self.counts[what.split(":")[0]] = self.counts.get(what.split(":")[0], 0) + 1
        if got != want:
            self.problems.append(f"{what}: got {str(got)[:300]!r}, want {str(want)[:300]!r}")

    def encode(self, text, add_special_tokens=True):
        return self.library.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens=True):
        return self.library.decode(ids, skip_special_tokens=skip_special_tokens)

    # -- Encoding and decoding ---------------------------------------------------------------------------------

    def encoding(self):
        texts = self.lines + [line.rstrip("\r\n") for line in self.lines] + [self.corpus]
        for number, text in enumerate(texts):
            want = self.encode(text)
            self.expect(f"encoding: transformers vs tokenizers, text {number}",
                        self.auto(text, add_special_tokens=True)["input_ids"], want)
            for path in ("/tokenize", "/v1/tokenize"):
                for add in (True, False):
                    answer = self.server.ok(path, {"prompt": text, "add_special_tokens": add})
                    self.expect(f"encoding: {path} add_special_tokens={add}, text {number} {text[:40]!r}",
                                (answer["tokens"], answer["count"]),
                                (self.encode(text, add), len(self.encode(text, add))))
        batch = self.lines[:12]
        answer = self.server.ok("/tokenize", {"prompt": batch})
        self.expect("encoding: a batch of prompts", answer["tokens"], [self.encode(t) for t in batch])

    def random_ids(self):
        size = self.library.get_vocab_size(with_added_tokens=True)
        ids = []
        for _ in range(self.rng.randint(1, 24)):
            kind = self.rng.random()
            if kind < 0.3:
                ids.append(self.rng.randrange(256))  # single bytes: lead and continuation bytes among them
            elif kind < 0.85:
                ids.append(self.rng.randrange(256, size - 26))
            elif kind < 0.97:
                ids.append(self.rng.randrange(size - 26, size))  # Qwen's added tokens, special or not
            else:
                ids.append(self.rng.randrange(size, self.vocab_size))  # padded embedding rows: no text
        return ids

    def decoding(self):
        lists = [self.encode(line) for line in self.lines] + [self.random_ids() for _ in range(200)]
        for number, ids in enumerate(lists):
            for path in ("/detokenize", "/v1/detokenize"):
                for skip in (True, False):
                    answer = self.server.ok(path, {"tokens": ids, "skip_special_tokens": skip})
                    self.expect(f"decoding: {path} skip_special_tokens={skip}, ids {ids[:12]}",
                                answer["text"], self.decode(ids, skip))
        answer = self.server.ok("/detokenize", {"tokens": lists[-8:]})
        self.expect("decoding: a batch of id lists", answer["text"], [self.decode(ids) for ids in lists[-8:]])
        status, _ = self.server.post("/detokenize", {"tokens": [self.vocab_size]})
        self.expect("decoding: an id past the vocabulary is a 400", status, 400)

    # -- Generated text ----------------------------------------------------------------------------------------

    def generated_text(self):
        for number, line in enumerate(self.lines):
            skip = self.rng.random() < 0.6
            params = {"max_new_tokens": self.rng.choice([1, 7, 32, 80]), "skip_special_tokens": skip,
                      "temperature": self.rng.choice([0, 0.7, 1.0, 1.3]), "sampling_seed": number}
            if self.rng.random() < 0.3:
                params["ignore_eos"] = True
            answer = self.server.ok("/generate", {"text": line, "sampling_params": params, "return_logprob": True,
                                                  "return_text_in_logprobs": True})
            ids = answer["output_ids"]
            finish = answer["meta_info"]["finish_reason"]
            trimmed = ids[:-1] if finish["type"] == "stop" and isinstance(finish.get("matched"), int) else ids
            self.expect(f"generated text: /generate skip_special_tokens={skip}, line {number} {line[:30]!r}",
                        answer["text"], self.decode(trimmed, skip))
            self.expect(f"generated text: prompt_tokens, line {number}",
                        answer["meta_info"]["prompt_tokens"], len(self.encode(line)))
            texts = [entry[2] for entry in answer["meta_info"]["output_token_logprobs"]]
            self.expect(f"generated text: return_text_in_logprobs, line {number}", texts,
                        [self.decode([i], False) for i in ids])

    # -- Chat templates ----------------------------------------------------------------------------------------

    @staticmethod
    def sglang_messages(messages):
        """What SGLang hands the template (MODEL.md 13.5): fields that are null left out, a null content as "",
        text parts joined by a space, and an assistant's JSON-string tool-call arguments parsed."""
        result = []
        for message in copy.deepcopy(messages):
            message = {k: v for k, v in message.items() if v is not None}
            content = message.get("content", "")
            if isinstance(content, list):
                content = " ".join(part["text"] for part in content if part.get("type") == "text")
            message["content"] = content
            for call in message.get("tool_calls") or ():
                function = call.get("function", {})
                if isinstance(function.get("arguments"), str):
                    function["arguments"] = json.loads(function["arguments"])
            result.append(message)
        return result

    def sglang_tools(self, tools):
        """The tools as the release hands them to the chat template: Pydantic's `model_dump` of its request
        models (`protocol.py`: `Tool`, `Function`; `serving_chat.py`), written here from those models."""
        out = []
        for tool in tools:
            function = tool["function"]
            if self.sglang_version == "0.5.3":
                # `item.function.model_dump()`: the function alone, every declared field.
                out.append({"description": function.get("description"), "name": function["name"],
                            "parameters": function.get("parameters"), "strict": function.get("strict") or False})
                continue
            defer = tool.get("defer_loading")
            function_defer = function.get("defer_loading")
            if function_defer is None:
                function_defer = defer  # Tool._propagate_defer_loading
            if self.sglang_version == "0.5.15":
                dumped = {"description": function.get("description"), "name": function["name"],
                          "parameters": function.get("parameters"), "strict": function.get("strict") or False}
                if function_defer is not None:
                    dumped["defer_loading"] = function_defer
            else:
                # 0.5.23's Function._serialize: unset strict and defer_loading dropped, the client's key order.
                data = {"description": function.get("description"), "name": function["name"],
                        "parameters": function.get("parameters"), "strict": function.get("strict"),
                        "defer_loading": function_defer}
                data = {k: v for k, v in data.items() if v is not None or k not in ("strict", "defer_loading")}
                order = list(function)
                dumped = {k: data[k] for k in order + [k for k in data if k not in order] if k in data}
            out.append({"type": tool.get("type", "function"), "function": dumped, "defer_loading": defer})
        return out

    def chat_templates(self):
        for name, fields in CONVERSATIONS:
            tools = fields.get("tools")
            choice = fields.get("tool_choice")
            if choice == "none":
                tools = None
            elif isinstance(choice, dict):
                tools = [t for t in tools if t["function"]["name"] == choice["function"]["name"]]
            if tools:
                tools = self.sglang_tools(tools)
            generation_prompts = (True, False) if self.sglang_version == "0.5.23" else (True,)
            for add_generation_prompt in generation_prompts:
                rendered = self.auto.apply_chat_template(
                    self.sglang_messages(fields["messages"]), tools=tools, tokenize=False,
                    add_generation_prompt=add_generation_prompt, **fields.get("chat_template_kwargs", {}))
                body = dict(fields, add_generation_prompt=add_generation_prompt)
                answer = self.server.ok("/tokenize", body)
                self.expect(f"chat template: ids of {name!r} (add_generation_prompt={add_generation_prompt})",
                            answer["tokens"], self.encode(rendered, add_special_tokens=False))
                # The tokenizer's normaliser writes text in NFC, so the ids hold the rendering's NFC form.
                self.expect(f"chat template: text of {name!r} (add_generation_prompt={add_generation_prompt})",
                            self.decode(answer["tokens"], False), unicodedata.normalize("NFC", rendered))
            # The chat completion runs the same prompt.
            chat = self.server.ok("/v1/chat/completions", dict(fields, max_tokens=1, temperature=0))
            rendered = self.auto.apply_chat_template(self.sglang_messages(fields["messages"]), tools=tools,
                                                     tokenize=False, add_generation_prompt=True,
                                                     **fields.get("chat_template_kwargs", {}))
            self.expect(f"chat template: prompt_tokens of a chat completion of {name!r}",
                        chat["usage"]["prompt_tokens"], len(self.encode(rendered, add_special_tokens=False)))
        broken = {"role": "assistant", "content": "", "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}]}
        status, answer = self.server.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Hi"}, broken, {"role": "user", "content": "?"}]})
        self.expect("chat template: tool-call arguments that are not JSON are a 400", status, 400)
        shape = (answer.get("object"), answer.get("type"), answer.get("code")) if isinstance(answer, dict) else answer
        self.expect("chat template: the 400 is an OpenAI error object", shape, ("error", "BadRequestError", 400))

    # -- Streams -----------------------------------------------------------------------------------------------

    def split_lengths(self, prompt, params):
        """Lengths at which the answer's last id ends inside a character (its decoding ends in U+FFFD)."""
        answer = self.server.ok("/generate", {"text": prompt, "sampling_params": dict(params, max_new_tokens=64)})
        ids = answer["output_ids"]
        return [k for k in range(1, len(ids)) if self.decode(ids[:k]).endswith("\ufffd")]

    def streams(self):
        cases = []
        for number, line in enumerate(self.lines[:40]):
            params = {"temperature": 1.0, "sampling_seed": 1000 + number, "ignore_eos": True}
            split = self.split_lengths(line, params)
            lengths = [self.rng.choice([1, 5, 40])] + split[:2]
            cases.extend((line, dict(params, max_new_tokens=k), k in split) for k in lengths)
        splits = 0
        for number, (prompt, params, split) in enumerate(cases):
            splits += split
            whole = self.server.ok("/generate", {"text": prompt, "sampling_params": params})
            for interval in (1, 3):
                chunks = self.server.stream("/generate", {
                    "text": prompt, "stream": True, "sampling_params": dict(params, stream_interval=interval)})
                texts = [chunk["text"] for chunk in chunks]
                prefixes = all(b.startswith(a) for a, b in zip(texts, texts[1:]))
                self.expect(f"streams: /generate texts grow by appending, case {number}", prefixes, True)
                self.expect(f"streams: /generate interval {interval} reassembles, case {number} (split {split})",
                            texts[-1], whole["text"])
            completion = {"prompt": prompt, "max_tokens": params["max_new_tokens"], "temperature": 1.0,
                          "seed": params["sampling_seed"], "ignore_eos": True}
            want = self.server.ok("/v1/completions", completion)["choices"][0]["text"]
            chunks = self.server.stream("/v1/completions", dict(completion, stream=True))
            got = "".join(choice["text"] for chunk in chunks for choice in chunk.get("choices", []))
            self.expect(f"streams: /v1/completions deltas reassemble, case {number} (split {split})", got, want)
        if splits == 0:
            self.problems.append("streams: no answer ended inside a character: the split case tests nothing")
        self.counts["answers cut inside a character"] = splits

    def run(self):
        for step in (self.encoding, self.decoding, self.generated_text, self.chat_templates, self.streams):
            try:
                step()
            except AssertionError as e:
                self.problems.append(f"{step.__name__}: {e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="base URL of a running sglang-mock with --tokenizer")
    parser.add_argument("--tokenizer", required=True, help="the server's --tokenizer: a model directory")
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="text file of the encoding checks")
    parser.add_argument("--sglang-version", default="0.5.23", choices=("0.5.15", "0.5.23"))
    parser.add_argument("--seed", type=int, default=24, help="seed of the random ids and sampling")
    args = parser.parse_args()
    check = Check(Server(args.url), args.tokenizer, args.corpus, args.sglang_version, args.seed)
    check.run()
    for problem in check.problems[:60]:
        print("MISMATCH", problem, file=sys.stderr)
    print("checked: " + ", ".join(f"{what} {count}" for what, count in sorted(check.counts.items())))
    if check.problems:
        print(f"{len(check.problems)} problems", file=sys.stderr)
        return 1
    print("the server agrees with tokenizers and transformers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
