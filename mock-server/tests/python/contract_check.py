"""Checks sglang-mock's `/generate` JSON contract gate against SGLang 0.5.23's own decoder.

In 0.5.23, `/generate` first runs FastAPI's Pydantic parse of the dataclass `GenerateReqInput`
(`srt/managers/io_struct.py`; a failure is an HTTP 400 of another shape), then
`generate_contract_error(await request.json())` (`srt/entrypoints/api_contract.py`), which calls
`GenerateRequest.from_json_value(body)` from the generated module `sglang/api/v1/api_types.py` and answers
HTTP 400 `{"error": str(JsonContractError)}` on a violation, for stream and non-stream requests alike.

This script reads both judgments straight from a wheel, without importing sglang: it executes
`api_types.py` (which needs only msgspec), and rebuilds the Pydantic parse field by field from the
annotations of `GenerateReqInput` and the definitions they name, executed statement by statement from the
wheel's source. It then generates bodies deterministically: valid ones, and ones with exactly one
violation of every kind the decoder judges (wrong types, nulls, unknown keys, batches, i64 edges, large
floats). Bodies the Pydantic parse rejects are dropped: a real server's contract gate never sees them.
Each kept body is POSTed to the server, which must answer a violation with status 400 and exactly
`{"error": "<the decoder's text>"}`, and anything else with something other than a 400 whose body is an
object holding one string "error".

Usage:
    contract_check.py --wheel WHEEL --url http://127.0.0.1:PORT [--count N] [--seed S]
    contract_check.py --wheel WHEEL --dry-run        # generate and judge only, no server
"""

import __future__
import argparse
import ast
import builtins
import copy
import importlib
import json
import random
import re
import sys
import types
import zipfile
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import pydantic
import requests

API_TYPES = "sglang/api/v1/api_types.py"
IO_STRUCT = "sglang.srt.managers.io_struct"
REQUEST_CLASS = "GenerateReqInput"

# Third-party packages a definition read from the wheel may import, besides the standard library: the
# ones the contract and the parse themselves depend on. Anything else (torch, numpy, PIL, zmq) leaves the
# name unresolved.
IMPORTABLE = set(sys.stdlib_module_names) | {
    "annotated_types",
    "msgspec",
    "pydantic",
    "pydantic_core",
    "typing_extensions",
}

I64_EDGES = (2**63 - 1, 2**63, -(2**63), 2**64 - 1)
POSITIVE_EDGES = (2**63 - 1, 2**63, 2**64 - 1)
LARGE_FLOATS = (1e308, -1e308, 1.7976931348623157e308, 5e-324, 1e20, -0.0)

MAX_DISAGREEMENTS_SHOWN = 30
REQUEST_TIMEOUT_S = 30


# ---- the decoder: sglang/api/v1/api_types.py ----


def load_decoder(wheel: zipfile.ZipFile) -> types.ModuleType:
    """Executes the wheel's generated `api_types.py` as a module of its own (it imports only msgspec)."""
    module = types.ModuleType("_wheel_.sglang.api.v1.api_types")
    # msgspec resolves the postponed annotations of the Structs through sys.modules.
    sys.modules[module.__name__] = module
    code = compile(wheel.read(API_TYPES), f"{wheel.filename}/{API_TYPES}", "exec")
    exec(code, module.__dict__)
    return module


def contract_error(decoder: types.ModuleType, body: Any) -> Optional[str]:
    """`api_contract.generate_contract_error`: the decoder's violation text for a body, or None."""
    try:
        decoder.GenerateRequest.from_json_value(body)
    except decoder.JsonContractError as e:
        return str(e)
    return None


# ---- the Pydantic parse: GenerateReqInput's fields, from the wheel's source ----


class Unresolved(Exception):
    """A name whose definition cannot be executed from the wheel's source alone."""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _SourceModule:
    """One module of the wheel: its parsed source, the statement binding each top-level name, and a
    namespace (registered in sys.modules, so postponed annotations resolve) that receives the statements
    executed so far."""

    def __init__(self, name: str, path: str, source: bytes, wheel_name: str):
        self.name = name
        self.package = name if path.endswith("/__init__.py") else name.rpartition(".")[0]
        self.filename = f"{wheel_name}/{path}"
        self.tree = ast.parse(source, self.filename)
        self.flags = 0
        self.bindings: Dict[str, ast.stmt] = {}
        self.star_imports: List[ast.ImportFrom] = []
        self._collect(self.tree.body)
        self.namespace = types.ModuleType(f"_wheel_.{name}")
        sys.modules[self.namespace.__name__] = self.namespace
        self.resolving: Set[str] = set()

    def _collect(self, statements: List[ast.stmt]) -> None:
        """Records what each top-level statement binds, the last binding winning as at import time;
        `if TYPE_CHECKING:` contributes its `else` branch, as at run time."""
        for s in statements:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bindings[s.name] = s
            elif isinstance(s, ast.Assign):
                for target in s.targets:
                    for node in ast.walk(target):
                        if isinstance(node, ast.Name):
                            self.bindings[node.id] = s
            elif isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value:
                self.bindings[s.target.id] = s
            elif isinstance(s, ast.Import):
                for alias in s.names:
                    self.bindings[alias.asname or alias.name.split(".")[0]] = s
            elif isinstance(s, ast.ImportFrom):
                if s.module == "__future__":
                    if any(alias.name == "annotations" for alias in s.names):
                        self.flags |= __future__.annotations.compiler_flag
                    continue
                for alias in s.names:
                    if alias.name == "*":
                        self.star_imports.append(s)
                    else:
                        self.bindings[alias.asname or alias.name] = s
            elif isinstance(s, ast.If):
                if _is_type_checking(s.test):
                    self._collect(s.orelse)
                else:
                    self._collect(s.body)
                    self._collect(s.orelse)
            elif isinstance(s, ast.Try):
                self._collect(s.body)

    def absolute(self, node: ast.ImportFrom) -> str:
        """The absolute module name of a `from ... import` statement."""
        if not node.level:
            return node.module or ""
        base = self.package.split(".")
        base = base[: len(base) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))


class WheelSource:
    """Resolves a name of a wheel's module to a live object by executing, one statement at a time, the
    definition that binds it and, first, the definitions that one uses, across the modules it imports
    from. A module is never imported whole, so sglang's heavy dependencies are never needed: a name that
    leads to one of them is Unresolved."""

    def __init__(self, wheel: zipfile.ZipFile):
        self._wheel = wheel
        self._files = set(wheel.namelist())
        self._modules: Dict[str, _SourceModule] = {}

    def module(self, name: str) -> _SourceModule:
        """The parsed source of the wheel's module `name` (dotted)."""
        if name not in self._modules:
            base = name.replace(".", "/")
            for path in (f"{base}.py", f"{base}/__init__.py"):
                if path in self._files:
                    break
            else:
                raise Unresolved(f"module {name} is not in the wheel")
            self._modules[name] = _SourceModule(name, path, self._wheel.read(path), self._wheel.filename)
        return self._modules[name]

    def resolve(self, module_name: str, name: str) -> Any:
        """The object `name` denotes at the top level of the wheel's module `module_name`."""
        module = self.module(module_name)
        if name in module.namespace.__dict__:
            return module.namespace.__dict__[name]
        statement = module.bindings.get(name)
        if statement is None:
            value = self._from_star_imports(module, name)
        elif name in module.resolving:
            raise Unresolved(f"{module_name}.{name} depends on itself")
        else:
            module.resolving.add(name)
            try:
                if isinstance(statement, (ast.Import, ast.ImportFrom)):
                    value = self._imported(module, statement, name)
                else:
                    value = self._executed(module, statement, name)
            finally:
                module.resolving.discard(name)
        module.namespace.__dict__[name] = value
        return value

    def _from_star_imports(self, module: _SourceModule, name: str) -> Any:
        for star in module.star_imports:
            source = module.absolute(star)
            if source.split(".")[0] == "sglang":
                try:
                    return self.resolve(source, name)
                except Unresolved:
                    continue
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise Unresolved(f"{module.name}.{name} is not defined")

    def _imported(self, module: _SourceModule, statement: ast.stmt, name: str) -> Any:
        if isinstance(statement, ast.Import):
            alias = next(a for a in statement.names if (a.asname or a.name.split(".")[0]) == name)
            target = alias.name if alias.asname else alias.name.split(".")[0]
            return self._external(target, None)
        alias = next(a for a in statement.names if (a.asname or a.name) == name)
        source = module.absolute(statement)
        if source.split(".")[0] == "sglang":
            return self.resolve(source, alias.name)
        return self._external(source, alias.name)

    @staticmethod
    def _external(module_name: str, attribute: Optional[str]) -> Any:
        if module_name.split(".")[0] not in IMPORTABLE:
            raise Unresolved(f"{module_name} is not loaded (sglang's dependencies are not installed)")
        try:
            imported = importlib.import_module(module_name)
            return imported if attribute is None else getattr(imported, attribute)
        except (ImportError, AttributeError) as e:
            raise Unresolved(f"{module_name}.{attribute}: {e}") from None

    def _executed(self, module: _SourceModule, statement: ast.stmt, name: str) -> Any:
        own = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(statement.name)
        used = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for dependency in sorted(used - own):
            if dependency in module.bindings:
                self.resolve(module.name, dependency)
        code = compile(
            ast.Module(body=[statement], type_ignores=[]),
            module.filename,
            "exec",
            flags=module.flags,
            dont_inherit=True,
        )
        try:
            exec(code, module.namespace.__dict__)
        except Exception as e:
            raise Unresolved(f"{module.name}.{name}: {type(e).__name__}: {e}") from None
        return module.namespace.__dict__[name]


@dataclass(frozen=True)
class ParsedField:
    """One field of GenerateReqInput: its annotation as written, its validator, and what it left out."""

    name: str
    annotation: str
    adapter: pydantic.TypeAdapter
    unresolved: Tuple[str, ...]


class PydanticParse:
    """FastAPI's parse of a `/generate` body into the dataclass GenerateReqInput, field by field: a present
    field whose value fails its annotation's validation (Pydantic's lax mode on the decoded JSON, as
    FastAPI's `validate_python`) rejects the body; keys that are not fields are ignored."""

    def __init__(self, source: WheelSource):
        module = source.module(IO_STRUCT)
        request_class = next(
            s for s in module.tree.body if isinstance(s, ast.ClassDef) and s.name == REQUEST_CLASS
        )
        self.fields: Dict[str, ParsedField] = {}
        for statement in request_class.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                parsed = self._field(source, statement.target.id, statement.annotation)
                if parsed is not None:
                    self.fields[parsed.name] = parsed

    @staticmethod
    def _field(source: WheelSource, name: str, annotation: ast.expr) -> Optional[ParsedField]:
        """The field's validator; a name its annotation uses that cannot be resolved stands for Any."""
        text = ast.unparse(annotation)
        if text.startswith(("ClassVar", "typing.ClassVar")):
            return None
        namespace: Dict[str, Any] = {}
        unresolved = []
        for node in ast.walk(annotation):
            if isinstance(node, ast.Name) and node.id not in namespace:
                try:
                    namespace[node.id] = source.resolve(IO_STRUCT, node.id)
                except Unresolved as e:
                    namespace[node.id] = Any
                    unresolved.append(f"{node.id} ({e})")
        try:
            value = eval(compile(ast.Expression(annotation), IO_STRUCT, "eval"), namespace)
            adapter = pydantic.TypeAdapter(value)
        except Exception as e:
            adapter = pydantic.TypeAdapter(Any)
            unresolved.append(f"the whole annotation ({type(e).__name__}: {e})")
        return ParsedField(name, text, adapter, tuple(unresolved))

    def unchecked(self) -> Dict[str, Tuple[str, ...]]:
        """The fields checked only in part, or not at all, with the names that were left out."""
        return {f.name: f.unresolved for f in self.fields.values() if f.unresolved}

    def rejection(self, body: Dict[str, Any]) -> Optional[str]:
        """The first field of `body` the parse rejects, with Pydantic's message; None when it passes."""
        for key, value in body.items():
            field = self.fields.get(key)
            if field is None:
                continue
            try:
                field.adapter.validate_python(value)
            except pydantic.ValidationError as e:
                return f"{key}: {e.errors()[0]['msg']}"
        return None


# ---- the bodies ----


@dataclass(frozen=True)
class Case:
    """One value put at one key of an otherwise valid body: at the top level ("top"), in the
    sampling_params object ("sampling"), or in the second object of a batch's sampling_params list
    ("batch"). `label` says what the value is, for a valid value too."""

    place: str
    key: str
    value: Any
    label: str


def _cases(place: str, key: str, valid: List[Any], wrong: List[Tuple[str, Any]]) -> List[Case]:
    out = [Case(place, key, v, f"valid {type(v).__name__}") for v in valid]
    out.append(Case(place, key, None, "null"))
    out.extend(Case(place, key, v, label) for label, v in wrong)
    return out


INT_WRONG = [
    ("bool for int", True),
    ("bool for int", False),
    ("integral float for int", 4.0),
    ("large float for int", 1e20),
    ("fractional float for int", 1.5),
    ("string for int", "4"),
    ("list for int", [1]),
    ("map for int", {"value": 1}),
]
FLOAT_WRONG = [
    ("bool for float", True),
    ("string for float", "0.5"),
    ("list for float", [0.5]),
    ("map for float", {}),
]
BOOL_WRONG = [
    ("int for bool", 0),
    ("int for bool", 1),
    ("float for bool", 1.0),
    ("string for bool", "true"),
    ("list for bool", [True]),
    ("map for bool", {}),
]
STR_WRONG = [
    ("int for string", 1),
    ("bool for string", True),
    ("float for string", 1.5),
    ("list for string", ["a"]),
    ("map for string", {}),
]
STR_OR_LIST_WRONG = [
    ("int for string", 1),
    ("bool for string", False),
    ("int in string list", ["a", 1]),
    ("null in string list", [None]),
    ("nested list in string list", [["a"]]),
    ("map for string", {"a": "b"}),
]
INT_LIST_WRONG = [
    ("int for list", 1),
    ("float in int list", [1, 2.0]),
    ("bool in int list", [True]),
    ("string in int list", ["1"]),
    ("null in int list", [None]),
    ("nested list in int list", [[1]]),
    ("map for list", {}),
]
BOOL_OR_LIST_WRONG = BOOL_WRONG[:4] + [
    ("int in bool list", [True, 0]),
    ("string in bool list", ["true"]),
    ("null in bool list", [None]),
    ("map for bool", {}),
]
INT_OR_LIST_WRONG = INT_WRONG[:6] + [
    ("float in int list", [1.0]),
    ("string in int list", ["1"]),
    ("bool in int list", [True]),
    ("null in int list", [None]),
    ("map for int", {}),
]
OPTIONAL_STR_OR_LIST_WRONG = [
    ("int for string", 1),
    ("bool for string", True),
    ("int in string list", [1]),
    ("bool in string list", ["a", False]),
    ("map for string", {}),
]
OPTIONAL_INT_OR_LIST_WRONG = [
    ("integral float for int", 4.0),
    ("string for int", "80"),
    ("bool for int", True),
    ("float in int list", [1.0]),
    ("bool in int list", [None, True]),
    ("string in int list", ["1"]),
    ("map for int", {}),
]
TOKEN_IDS_WRONG = [
    ("bool first in token ids", [True, 2]),
    ("bool in token ids", [1, True]),
    ("bool in a token-id row", [[1, True]]),
    ("float in token ids", [1, 2.0]),
    ("float first in token ids", [1.0, 2.0]),
    ("string in token ids", ["1"]),
    ("null in token ids", [None]),
    ("i64 overflow in token ids", [1, 2**63]),
    ("int for token ids", 1),
    ("string for token ids", "1 2"),
    ("map for token ids", {}),
]
MEDIA_WRONG = [
    ("int for media", 1),
    ("bool for media", True),
    ("float for media", 1.5),
    ("int in media list", [1]),
    ("int in nested media list", [[1]]),
    ("int for media url", {"url": 1}),
    ("unknown key in media ref", {"colour": "red"}),
    ("int for media detail", [{"url": "x", "detail": 5}]),
    ("string for media fps", [[{"url": "x", "fps": "fast"}]]),
]


def sampling_cases(place: str) -> List[Case]:
    """Every key of SamplingParams with valid values, null, and wrong ones; and unknown keys."""
    table = {
        "max_new_tokens": ([0, 1, 2, 3] + list(I64_EDGES), INT_WRONG),
        "stop": (["\n", ["a", "b"], []], STR_OR_LIST_WRONG),
        "stop_token_ids": ([[1, 2], [], [2**63 - 1], [-(2**63)], [2**64 - 1]], INT_LIST_WRONG),
        "stop_regex": (["x+", ["a"]], STR_OR_LIST_WRONG),
        "temperature": ([0, 0.0, 0.7, 1, 2.5] + list(LARGE_FLOATS), FLOAT_WRONG),
        "top_p": ([0.9, 1, 2**64] + list(LARGE_FLOATS), FLOAT_WRONG),
        "top_k": ([1, -1, 50] + list(I64_EDGES), INT_WRONG),
        "min_p": ([0, 0.1] + list(LARGE_FLOATS), FLOAT_WRONG),
        "frequency_penalty": ([0, 0.5, -0.5] + list(LARGE_FLOATS), FLOAT_WRONG),
        "presence_penalty": ([0, 0.5, -0.5] + list(LARGE_FLOATS), FLOAT_WRONG),
        "repetition_penalty": ([1, 1.2] + list(LARGE_FLOATS), FLOAT_WRONG),
        "min_new_tokens": ([0, 1] + list(I64_EDGES), INT_WRONG),
        "n": ([1, 2, 3] + list(I64_EDGES), INT_WRONG),
        "json_schema": (['{"type": "string"}'], STR_WRONG),
        "regex": (["[a-z]+"], STR_WRONG),
        "ebnf": (['root ::= "a"'], STR_WRONG),
        "structural_tag": (['{"type": "structural_tag"}'], STR_WRONG),
        "ignore_eos": ([True, False], BOOL_WRONG),
        "skip_special_tokens": ([True, False], BOOL_WRONG),
        "spaces_between_special_tokens": ([True, False], BOOL_WRONG),
        "no_stop_trim": ([True, False], BOOL_WRONG),
        "stream_interval": ([1, 2, 0, -1] + list(I64_EDGES), INT_WRONG),
        "logit_bias": (
            [{"1": 0.5}, {"5": -100}, {}, {"1": 1e308}, {"not-a-token": 1}],
            [
                ("string value in map", {"1": "x"}),
                ("bool value in map", {"1": True}),
                ("null value in map", {"1": None}),
                ("list value in map", {"1": [1]}),
                ("list for map", [1]),
                ("int for map", 1),
                ("string for map", "x"),
            ],
        ),
        "sampling_seed": ([0, 42] + list(I64_EDGES), INT_WRONG),
        "custom_params": ([{"a": 1}, [1, 2], "x", 1, True], []),
        "beam_width": ([1, 2] + list(I64_EDGES), INT_WRONG),
        "watermark": (
            [
                {},
                {"enabled": False},
                {"enabled": True, "key": "k", "context_window": 4},
                {"enabled": None, "key": None, "context_window": None},
                {"context_window": 2**63 - 1},
            ],
            [
                ("unknown key in watermark", {"colour": 1}),
                ("unknown key in watermark", {"enabled": True, "Enabled": True}),
                ("int for bool in watermark", {"enabled": 1}),
                ("int for string in watermark", {"key": 1}),
                ("float for int in watermark", {"context_window": 4.0}),
                ("bool for int in watermark", {"context_window": True}),
                ("list for map", []),
                ("string for map", "on"),
                ("bool for map", True),
            ],
        ),
        "choice": (
            [["a", "b"], []],
            [
                ("string for list", "a"),
                ("int in string list", ["a", 1]),
                ("null in string list", [None]),
                ("map for list", {}),
            ],
        ),
    }
    out = [c for key, (valid, wrong) in table.items() for c in _cases(place, key, valid, wrong)]
    for key, value in [
        ("colour", 1),
        ("max_tokens", 2),
        ("seed", 1),
        ("Temperature", 0.5),
        ("logprobs", True),
        ("top_n", None),
        ("", 1),
    ]:
        out.append(Case(place, key, value, "unknown key"))
    return out


def top_level_cases() -> List[Case]:
    """Every field of GenerateRequest with valid values, null, and wrong ones (many of which the Pydantic
    parse rejects first: they are generated anyway and dropped, so the drop count shows them); and keys
    the decoder ignores (unknown to both, or fields of GenerateReqInput only)."""
    str_map_wrong = [
        ("int value in map", {"a": 1}),
        ("null value in map", {"a": None}),
        ("list for map", [1]),
        ("string for map", "x"),
    ]
    table = {
        "rid": (["contract-rid"], STR_OR_LIST_WRONG),
        "text": (["Hi", ["a", "b"]], STR_OR_LIST_WRONG),
        "input_ids": ([[1, 2, 3], [[1, 2], [3]], [], [2**63 - 1]], TOKEN_IDS_WRONG),
        "stream": ([True, False], BOOL_WRONG + [("string for bool", "yes")]),
        "sampling_params": (
            [{"max_new_tokens": 1}, [{"max_new_tokens": 2}], {}, []],
            [("string for map", "x"), ("int in map list", [1]), ("bool for map", True)],
        ),
        "return_logprob": ([True, False, [True]], BOOL_OR_LIST_WRONG),
        "logprob_start_len": ([-1, 0, 1, [0]] + list(I64_EDGES), INT_OR_LIST_WRONG),
        "top_logprobs_num": ([0, 1, 2, [1]] + list(POSITIVE_EDGES), INT_OR_LIST_WRONG),
        "token_ids_logprob": ([[1, 2], [[1], [2]], []], TOKEN_IDS_WRONG[:7] + [("int for list", 1)]),
        "return_hidden_states": (
            [False, [False]],
            BOOL_OR_LIST_WRONG + [("the string 'last'", "last"), ("the string 'last' in a list", ["last"])],
        ),
        "return_text_in_logprobs": ([True, False], BOOL_WRONG),
        "bootstrap_host": ([[None]], OPTIONAL_STR_OR_LIST_WRONG),
        "bootstrap_port": ([[None]] + list(I64_EDGES), OPTIONAL_INT_OR_LIST_WRONG),
        "bootstrap_room": ([[None], 0] + list(I64_EDGES), OPTIONAL_INT_OR_LIST_WRONG),
        "bootstrap_pair_key": ([[None]], OPTIONAL_STR_OR_LIST_WRONG),
        "decode_tp_size": ([[None]] + list(I64_EDGES), OPTIONAL_INT_OR_LIST_WRONG),
        "routed_dp_rank": ([0] + list(I64_EDGES), INT_WRONG),
        "disagg_prefill_dp_rank": ([0] + list(I64_EDGES), INT_WRONG),
        "image_data": ([[]], MEDIA_WRONG),
        "video_data": ([[]], MEDIA_WRONG[:5]),
        "audio_data": ([[]], MEDIA_WRONG[:5]),
        "mm_hashes": (
            [[]],
            [("string for list", "a"), ("int in string list", [1]), ("int in nested list", [["a", 1]])],
        ),
        "extra_key": (["k"], STR_OR_LIST_WRONG),
        "priority": ([0, 1] + list(I64_EDGES), INT_WRONG),
        "cache_salt": (["salt"], STR_OR_LIST_WRONG),
        "require_reasoning": ([False], BOOL_WRONG),
        "lora_path": ([[None]], OPTIONAL_STR_OR_LIST_WRONG),
        "session_params": ([], [("list for map", [1]), ("string for map", "x")]),
        "kv_hints": (
            [{"protocol_version": "v1", "message_id": "m", "actions": []}, [None], {"actions": None}],
            [
                ("int for string in kv_hints", {"protocol_version": 1}),
                ("null for string in kv_hints", {"message_id": None}),
                ("string for list in kv_hints", {"actions": "x"}),
                ("int for string in a kv_hints action", {"actions": [{"action_id": 1}]}),
                ("int in kv_hints list", [1]),
                ("string for kv_hints", "x"),
            ],
        ),
        "routing_key": (["k"], STR_WRONG),
        "max_thinking_tokens": (
            [0, 2] + list(POSITIVE_EDGES),
            INT_WRONG + [("negative for u64", -1), ("negative for u64", -(2**63))],
        ),
        "session_id": ([], STR_WRONG),
        "custom_logit_processor": ([[None]], OPTIONAL_STR_OR_LIST_WRONG),
        "custom_labels": ([{}, {"team": "rl"}], str_map_wrong + [("bool value in map", {"a": True})]),
        "images_config": (
            [{}, {"image_mode": "x", "prefix": "p"}, {"colour": 1}],
            [
                ("null for string in images_config", {"prefix": None}),
                ("int for string in images_config", {"prefix": 1}),
                ("int for string in images_config", {"image_mode": 1}),
                ("list for map", []),
                ("string for map", "x"),
            ],
        ),
        "return_prompt_token_ids": ([True, False], BOOL_WRONG),
        "routed_experts_start_len": (
            [0, 1] + list(I64_EDGES),
            [("fractional float for int", 1.5)] + INT_WRONG[:4] + INT_WRONG[5:],
        ),
        "return_sampling_mask": ([False, [False]], BOOL_OR_LIST_WRONG),
        "modalities": (
            [[]],
            [("null in string list", [None]), ("string for list", "image"), ("int in string list", [1])],
        ),
    }
    out = [c for key, (valid, wrong) in table.items() for c in _cases("top", key, valid, wrong)]
    for key, value in [
        ("foo", 1),
        ("max_new_tokens", 2),
        ("temperature", 0.5),
        ("prompt", "x"),
        ("model", "m"),
        ("logprobs", True),
        ("Stream", "yes"),
        ("watermark", {"enabled": False}),
    ]:
        out.append(Case("top", key, value, "unknown key"))
    for key, value in [
        ("log_metrics", False),
        ("no_logs", True),
        ("conversation_id", "c"),
        ("return_entropy", False),
        ("data_parallel_rank", None),
        ("log_metrics", "maybe"),
    ]:
        out.append(Case("top", key, value, "GenerateReqInput-only key"))
    return out


def batch_cases() -> List[Case]:
    """The second object of a batch's sampling_params list: each key's first wrong value, and an unknown
    key."""
    out = [Case("batch", "max_new_tokens", 1, "valid batch")]
    seen = set()
    for case in sampling_cases("batch"):
        if case.label.startswith(("valid", "null")) or case.key in seen:
            continue
        seen.add(case.key)
        out.append(case)
    return out


def check_coverage(decoder: types.ModuleType, catalogue: List[Case]) -> List[str]:
    """The decoder's fields the catalogue has no case for (the wheel has a field this script doesn't
    know)."""
    keys = {(c.place, c.key) for c in catalogue}
    missing = [
        f"sampling_params.{k}"
        for k in decoder.SamplingParams.__struct_fields__
        if ("sampling", k) not in keys
    ]
    missing += [k for k in decoder.GenerateRequest.__struct_fields__ if ("top", k) not in keys]
    return missing


# Violations that the Pydantic parse lets through, added last to a body that would be valid but costly to
# serve (a huge max_new_tokens, n or top_logprobs_num, a default max_new_tokens of 128): the body becomes a
# contract 400, and whether the earlier, costly value is judged the same way still shows in the error text.
COMPANIONS = [
    ("return_logprob", 0),
    ("logprob_start_len", 4.0),
    ("priority", 1.0),
    ("max_thinking_tokens", -1),
    ("images_config", {"prefix": None}),
    ("return_text_in_logprobs", "true"),
    ("routed_dp_rank", 1.0),
]


def _small(value: Any, limit: int) -> bool:
    values = value if isinstance(value, list) else [value]
    return all(v is None or (isinstance(v, int) and v <= limit) for v in values)


def cheap(body: Dict[str, Any]) -> bool:
    """Whether a valid body is cheap to serve: at most 2 new tokens per sample (no default of 128), at most 2
    samples, and few top logprobs."""
    params = body.get("sampling_params")
    objects = params if isinstance(params, list) else [params]
    if not objects or not all(isinstance(p, dict) for p in objects):
        return False
    for p in objects:
        if not (isinstance(p.get("max_new_tokens"), int) and 0 <= p["max_new_tokens"] <= 2):
            return False
        if not all(_small(p.get(key), 2) for key in ("n", "min_new_tokens", "beam_width")):
            return False
    return _small(body.get("top_logprobs_num"), 5)


def base_body(rng: random.Random, index: int, batch: bool) -> Dict[str, Any]:
    """A small valid body: a short prompt, one or two new tokens."""
    sampling: Dict[str, Any] = {"max_new_tokens": rng.choice((1, 2))}
    if rng.random() < 0.5:
        sampling["temperature"] = rng.choice((0.0, 0.5, 1.0))
    if batch:
        return {"input_ids": [[1, 2, 3], [4, 5]], "sampling_params": [sampling, {"max_new_tokens": 1}]}
    body: Dict[str, Any] = (
        {"input_ids": [1, 2, 3]} if rng.random() < 0.6 else {"text": rng.choice(("Hello", "The answer is"))}
    )
    body["sampling_params"] = sampling
    if rng.random() < 0.3:
        body["return_logprob"] = True
    if rng.random() < 0.3:
        body["rid"] = f"contract-{index}"
    return body


def _shuffled(rng: random.Random, d: Dict[str, Any]) -> Dict[str, Any]:
    keys = list(d)
    rng.shuffle(keys)
    return {k: d[k] for k in keys}


def apply_case(body: Dict[str, Any], case: Case) -> None:
    """Puts the case's value at its place in the body."""
    value = copy.deepcopy(case.value)
    if case.place == "top":
        if case.key in ("text", "input_ids"):
            body.pop("text", None)
            body.pop("input_ids", None)
        body[case.key] = value
    elif case.place == "sampling":
        body["sampling_params"][case.key] = value
    else:
        body["sampling_params"][1][case.key] = value


def build_body(rng: random.Random, index: int, cases: List[Case], stream: bool) -> Dict[str, Any]:
    """A base body with the cases applied in order, its keys (and those of its sampling_params objects)
    in a random order, since the decoder reports the first violation in document order."""
    body = base_body(rng, index, batch=any(c.place == "batch" for c in cases))
    if stream:
        body["stream"] = True
    for case in cases:
        apply_case(body, case)
    params = body.get("sampling_params")
    if isinstance(params, dict):
        body["sampling_params"] = _shuffled(rng, params)
    elif isinstance(params, list):
        body["sampling_params"] = [_shuffled(rng, p) if isinstance(p, dict) else p for p in params]
    return _shuffled(rng, body)


@dataclass
class Generated:
    """A kept body, with the decoder's judgment and the cases it was built from."""

    body: Dict[str, Any]
    violation: Optional[str]
    cases: Tuple[Case, ...]


@dataclass
class Generation:
    """The kept bodies, and how many bodies the Pydantic parse dropped (by field)."""

    kept: List[Generated]
    dropped: Counter


def generate(
    rng: random.Random,
    count: int,
    catalogue: List[Case],
    judge: Callable[[Dict[str, Any]], Tuple[Optional[str], Optional[str]]],
) -> Generation:
    """At least `count` kept bodies: first one per catalogue case, then random ones (a quarter valid with
    one to three valid values, the rest one catalogue case each), about 20% of them streamed."""
    # Valid values to combine: not a whole sampling_params (the sampling cases need its object).
    valid_cases = [
        c
        for c in catalogue
        if c.label.startswith("valid")
        and c.place != "batch"
        and (c.place, c.key) != ("top", "sampling_params")
    ]
    kept: List[Generated] = []
    dropped: Counter = Counter()
    index = 0
    while len(kept) < max(count, 1) or index < len(catalogue):
        if index < len(catalogue):
            cases = [catalogue[index]]
        elif rng.random() < 0.25:
            picked = rng.sample(valid_cases, rng.randint(1, 3))
            cases = list({(c.place, c.key): c for c in picked}.values())
        else:
            cases = [rng.choice(catalogue)]
        stream = rng.random() < 0.2 and all(c.key != "stream" for c in cases)
        body = build_body(rng, index, cases, stream)
        index += 1
        rejection, violation = judge(body)
        if rejection is None and violation is None and not cheap(body):
            key, value = next((k, v) for k, v in COMPANIONS if k not in body)
            body[key] = value
            cases.append(Case("top", key, value, "companion violation"))
            rejection, violation = judge(body)
        if rejection is not None:
            dropped[rejection.split(":")[0]] += 1
            continue
        if violation is None and not cheap(body):
            raise RuntimeError(f"the generator made a valid body that is costly to serve: {body}")
        kept.append(Generated(body, violation, tuple(cases)))
    return Generation(kept, dropped)


# ---- the report ----


def violation_kind(text: str) -> str:
    """An error text with its values elided, so the kinds of violation can be counted."""
    text = re.sub(r"`[^`]*`", "`_`", text)
    text = re.sub(r'string "[^"]*"', 'string "_"', text)
    return re.sub(r"expected one of `_`.*", "expected one of `_`, ...", text)


def print_coverage(generation: Generation, parse: PydanticParse) -> None:
    """The kinds of violation the kept bodies carry, the case labels they cover, and what was dropped."""
    kinds = Counter(violation_kind(g.violation) for g in generation.kept if g.violation)
    print("decoder violations by kind (values elided):")
    for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:5d}  {kind}")
    labels = Counter(
        f"{c.place} {c.label}{': violation' if g.violation else ''}" for g in generation.kept for c in g.cases
    )
    print(f"case labels among kept bodies ({len(labels)} distinct):")
    for label, n in sorted(labels.items()):
        print(f"  {n:5d}  {label}")
    print("dropped by the Pydantic parse, by field:")
    for field, n in sorted(generation.dropped.items()):
        print(f"  {n:5d}  {field}")
    unchecked = parse.unchecked()
    print(
        f"Pydantic parse: {len(parse.fields)} fields of {REQUEST_CLASS}, {len(unchecked)} not fully checked"
    )
    for field, names in sorted(unchecked.items()):
        print(f"  unchecked: {field}: {'; '.join(names)}")


def served(session: requests.Session, url: str, body: Dict[str, Any]) -> Tuple[int, Any, str]:
    """POSTs a body to /generate and reads the whole answer: its status, its JSON value (None when it is
    not JSON) and its text."""
    response = session.post(
        f"{url}/generate",
        data=json.dumps(body),
        headers={"Content-Type": "application/json"},
        timeout=REQUEST_TIMEOUT_S,
    )
    text = response.content.decode("utf-8", "replace")
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return response.status_code, value, text


def agrees(expected: Optional[str], status: int, value: Any) -> bool:
    """A violation must be answered 400 `{"error": <its text>}` exactly; anything else must not be
    answered 400 with an object holding one string "error"."""
    if expected is not None:
        return status == 400 and value == {"error": expected}
    contract_shaped = isinstance(value, dict) and list(value) == ["error"] and isinstance(value["error"], str)
    return not (status == 400 and contract_shaped)


def run_against(url: str, kept: List[Generated]) -> int:
    """Sends every kept body and prints the disagreements; the number of agreements."""
    session = requests.Session()
    agreed = 0
    shown = 0
    for g in kept:
        try:
            status, value, text = served(session, url, g.body)
        except requests.RequestException as e:
            status, value, text = 0, None, f"{type(e).__name__}: {e}"
        if agrees(g.violation, status, value):
            agreed += 1
            continue
        shown += 1
        if shown <= MAX_DISAGREEMENTS_SHOWN:
            expected = (
                f'400 {json.dumps({"error": g.violation})}'
                if g.violation
                else 'anything but 400 {"error": "<string>"}'
            )
            print(f"disagreement {shown}:")
            print(f"  body:     {json.dumps(g.body)}")
            print(f"  expected: {expected}")
            print(f"  got:      {status} {text[:400]!r}")
    if shown > MAX_DISAGREEMENTS_SHOWN:
        print(f"... and {shown - MAX_DISAGREEMENTS_SHOWN} more disagreements")
    return agreed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", required=True, help="an SGLang 0.5.23 wheel (read with zipfile)")
    parser.add_argument("--url", help="the server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--count", type=int, default=2400, help="bodies kept after the Pydantic filter")
    parser.add_argument("--seed", type=int, default=0, help="seed of the body generator")
    parser.add_argument("--dry-run", action="store_true", help="generate and judge the bodies, send none")
    args = parser.parse_args()
    if not args.dry_run and not args.url:
        parser.error("--url is required unless --dry-run")

    with zipfile.ZipFile(args.wheel) as wheel:
        if API_TYPES not in wheel.namelist():
            print(f"{args.wheel} has no {API_TYPES}: the JSON contract gate is 0.5.23's", file=sys.stderr)
            return 2
        decoder = load_decoder(wheel)
        parse = PydanticParse(WheelSource(wheel))

    catalogue = sampling_cases("sampling") + batch_cases() + top_level_cases()
    missing = check_coverage(decoder, catalogue)
    if missing:
        print(f"the generator has no cases for these decoder fields: {', '.join(missing)}", file=sys.stderr)
        return 2

    def judge(body: Dict[str, Any]) -> Tuple[Optional[str], Optional[str]]:
        parsed = json.loads(json.dumps(body))
        rejection = parse.rejection(parsed)
        return rejection, None if rejection else contract_error(decoder, parsed)

    generation = generate(random.Random(args.seed), args.count, catalogue, judge)
    kept = generation.kept
    violations = sum(1 for g in kept if g.violation)
    streamed = sum(1 for g in kept if g.body.get("stream") is True)
    print_coverage(generation, parse)
    print(
        f"generated {len(kept) + sum(generation.dropped.values())} bodies from {len(catalogue)} cases: "
        f"{len(kept)} kept ({violations} decoder violations, {streamed} streamed), "
        f"{sum(generation.dropped.values())} dropped by the Pydantic parse"
    )
    if args.dry_run:
        return 0

    agreed = run_against(args.url.rstrip("/"), kept)
    print(f"contract: {len(kept)} bodies, {violations} decoder violations, {agreed} agree")
    return 0 if agreed == len(kept) else 1


if __name__ == "__main__":
    sys.exit(main())
