"""The audit of a trainer's own samples against what the server served (``mock-server/WITNESS.md``).

A server started with ``--ledger`` (``serve()`` and the pytest fixture start it so) records every item it
answers. :meth:`MockServer.audit <sglang_mock.MockServer.audit>` sends it the samples a rollout built and
returns an :class:`AuditReport`; :meth:`MockServer.assert_faithful` raises ``AssertionError`` with the report
when a sample lost, shifted, zero-filled or invented a logprob, filed generated tokens as environment output,
trained on tokens the server never generated, or carries routes or weight versions that do not match, and when
the audit compared nothing (no samples, or none of their tokens trained: ``nothing-audited``). A sample the
server cannot read is bad input, not an unfaithful sample: both raise ``ValueError`` with the server's words,
which name the sample, the field and the element (``samples[3].rollout_log_probs[7]: expected a number, got the
string "abc"``).

Samples are what the frameworks build, or dicts with their field names: slime's and miles' ``Sample`` (through
``to_dict()``), verl's ``AgentLoopOutput``, AReaL's ``ModelResponse`` and trajectory dicts, or a generic dict
(``prompt_ids``, ``response_ids``, ``loss_mask``, ``logprobs``, ``routed_experts``, ``versions``). The server
reads the field names; this module only turns objects into dicts and arrays into compact typed arrays
(``{"dtype", "shape", "b64"}``), so that a batch of long samples travels quickly.
"""

from __future__ import annotations

import array
import base64
import dataclasses
import json
import math
import numbers
import sys
import urllib.error
import urllib.request
from typing import Any, Dict, Iterable, List, Optional

__all__ = ["AuditReport", "Problem", "audit"]

# Every key a layout reads (mock-core/src/witness/samples.rs, `RawSample`); the others stay on the client.
_KEYS = (
    "layout", "id", "index",
    "tokens", "response_length", "rollout_log_probs", "rollout_routed_experts", "weight_version_spans",
    "weight_versions",
    "prompt_ids", "response_ids", "response_mask", "response_logprobs",
    "input_tokens", "output_tokens", "output_logprobs", "output_versions", "input_ids",
    "loss_mask", "logprobs", "routed_experts", "versions",
)
# Keys whose values are not numeric columns.
_PLAIN = ("layout", "id", "index", "response_length", "weight_version_spans", "weight_versions")

# The `array` module's type codes a list is packed with, smallest first, and NumPy's names for them. The audit
# compares logprobs as float32 (what the server sends), so float32 loses nothing it compares.
_ARRAY_DTYPES = {
    code: name
    for code, name in (("i", "int32"), ("q", "int64"), ("f", "float32"))
    if array.array(code).itemsize == int(name[-2:]) // 8
}


@dataclasses.dataclass(frozen=True)
class Problem:
    """One way a sample disagrees with what the server served, at ``start:end`` of its per-token arrays.

    ``sample`` is the sample's position in the audited list and ``sample_id`` its ``id`` or ``index`` (both
    ``None`` for a problem of the whole batch, ``nothing-audited``); ``sample_label`` is how the report names it,
    the id followed by the position when another sample has the same id (``0 (samples[2])``)."""

    sample: Optional[int]
    sample_id: Optional[str]
    sample_label: str
    kind: str
    channel: str
    start: int
    end: int
    rid: Optional[str]
    expected: Optional[str]
    found: Optional[str]
    message: str

    def __str__(self) -> str:
        if self.sample is None:
            return f"{self.sample_label} [{self.kind}]: {self.message}"
        return f"sample {self.sample_label} [{self.kind}] {self.channel}[{self.start}:{self.end}]: {self.message}"


@dataclasses.dataclass(frozen=True)
class AuditReport:
    """What an audit found: ``ok`` when every sample is faithful, else the ``problems``; ``str()`` is the
    report as text. ``checked_logprobs`` and ``checked_versions`` count the trained tokens whose logprob and
    whose weight-version label were compared with what the server served; ``version_fields`` names the fields
    the labels came from, empty when the samples carry none (then no version was checked)."""

    ok: bool
    samples: int
    samples_with_problems: int
    tokens: int
    trained_tokens: int
    checked_logprobs: int
    checked_versions: int
    version_fields: List[str]
    matched_items: int
    problems: List[Problem]
    text: str

    def __str__(self) -> str:
        return self.text

    def __bool__(self) -> bool:
        return self.ok

    def kinds(self) -> List[str]:
        """The kinds of the problems, in report order."""
        return [p.kind for p in self.problems]


def _typed(dtype: str, shape: List[int], data: bytes) -> Dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "b64": base64.b64encode(data).decode("ascii")}


def _tensor(value: Any) -> Optional[Dict[str, Any]]:
    """A NumPy array or a torch tensor as a typed array; ``None`` for anything else."""
    module = type(value).__module__.split(".")[0]
    if module == "torch":
        value = value.detach().cpu()
        # NumPy has no bfloat16: widen it (and half precision) to float32 first, as the audit compares float32.
        if str(value.dtype) in ("torch.bfloat16", "torch.float16"):
            value = value.float()
        value = value.numpy()
        module = "numpy"
    if module != "numpy" or not hasattr(value, "dtype"):
        return None
    import numpy  # only reached with a NumPy value in hand

    name = str(value.dtype)
    if name == "float16":
        value, name = value.astype(numpy.float32), "float32"
    elif name in ("int8", "uint16", "uint32", "uint64"):
        value, name = value.astype(numpy.int64), "int64"
    data = numpy.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"), copy=False).tobytes()
    return _typed(name, list(value.shape), data)


def _flat(value: list) -> Optional[tuple]:
    """A rectangular nested list as (flat values, shape); ``None`` when it is ragged."""
    shape = []
    probe: Any = value
    while isinstance(probe, list):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    flat = value
    for depth in range(len(shape) - 1):
        width = shape[depth + 1]
        if not all(isinstance(row, list) and len(row) == width for row in flat):
            return None
        flat = [x for row in flat for x in row]
    return flat, shape


def _packed(values: list, shape: List[int]) -> Optional[Dict[str, Any]]:
    """Numbers as a typed array: int32 (or int64) when they are all integers, float32 when they are all real
    numbers (NumPy's scalars included); ``None`` when one is neither (``None``, a string). ``array`` checks every
    element in C, which is what makes a long list cheap to send."""
    for code in _ARRAY_DTYPES:
        try:
            packed = array.array(code, values)
        except (TypeError, OverflowError):
            continue
        if sys.byteorder != "little":
            packed.byteswap()
        return _typed(_ARRAY_DTYPES[code], shape, packed.tobytes())
    return None


# The shortest column worth packing as a typed array: below it a list of plain numbers goes as it is, which
# `json.dumps` writes faster than a typed array is built (`bench/audit.py --short`, bench/README.md).
_PACK_FROM = 32


def _plain(values: list) -> bool:
    """Whether JSON carries ``values`` as they are: Python ints, bools and finite floats (not NumPy scalars,
    which ``json`` cannot write, nor NaN and the infinities, which JSON has no numbers for)."""
    for x in values:
        kind = type(x)
        if kind is float:
            if not -math.inf < x < math.inf:
                return False
        elif kind is not int and kind is not bool:
            return False
    return True


def _column(value: Any) -> Any:
    """A column as the server reads it: a short list of plain numbers as it is, a typed array when it holds only
    numbers, else the list with ``None`` kept and non-finite numbers spelled as the server reads them (JSON has
    no NaN)."""
    if value is None or isinstance(value, (str, bytes, int, float, dict)):
        return value
    tensor = _tensor(value)
    if tensor is not None:
        return tensor
    if not isinstance(value, list):
        try:
            value = list(value)
        except TypeError:
            return value
    flat = _flat(value)
    if flat is not None and len(flat[0]) < _PACK_FROM and _plain(flat[0]):
        return value
    packed = _packed(*flat) if flat is not None else None
    # `None` (or another odd value) inside, or a ragged list: the list as it is, so that the report can name it.
    return packed if packed is not None else [_spell(x) for x in value]


def _spell(x: Any) -> Any:
    """A list element JSON can carry: NaN and the infinities as the strings the server reads."""
    if isinstance(x, (list, tuple)):
        return [_spell(y) for y in x]
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        x = float(x)
        if not math.isfinite(x):
            return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    return x


def _as_dict(sample: Any) -> Dict[str, Any]:
    """A sample object's fields: a dict as it is, ``to_dict()`` (slime, miles), a pydantic model (verl), a
    dataclass (AReaL) or any object's attributes."""
    if isinstance(sample, dict):
        return sample
    for method in ("to_dict", "model_dump"):
        if callable(getattr(sample, method, None)):
            return getattr(sample, method)()
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return {f.name: getattr(sample, f.name) for f in dataclasses.fields(sample)}
    if hasattr(sample, "__dict__"):
        return dict(vars(sample))
    raise TypeError(f"cannot read a sample from {type(sample).__name__}: pass a dict or a framework's sample object")


def encode_sample(sample: Any) -> Dict[str, Any]:
    """One sample as the server's audit reads it: the keys it knows, numeric columns as typed arrays."""
    fields = _as_dict(sample)
    out: Dict[str, Any] = {}
    for key in _KEYS:
        if key not in fields:
            continue
        value = fields[key]
        if key in _PLAIN:
            if key == "weight_version_spans" and value is not None:
                value = [
                    span if isinstance(span, dict) else {"version": span.version, "start": span.start, "end": span.end}
                    for span in value
                ]
            elif key in ("id", "index") and value is not None and not isinstance(value, (str, int, float)):
                value = str(value)
            out[key] = value
        else:
            out[key] = _column(value)
    return out


def audit(
    url: str,
    samples: Iterable[Any],
    *,
    layout: Optional[str] = None,
    allow_masked_generated: bool = False,
    api_key: Optional[str] = None,
    timeout: float = 300.0,
) -> AuditReport:
    """Audits ``samples`` against the ledger of the server at ``url`` (``POST /admin/audit``). Raises
    ``ValueError`` with the server's message when it cannot read a sample (or refuses the request), and
    ``TypeError`` for an object that is no sample."""
    encoded = []
    for k, sample in enumerate(samples):
        try:
            encoded.append(encode_sample(sample))
        except TypeError as err:
            raise TypeError(f"samples[{k}]: {err}") from None
    body: Dict[str, Any] = {
        "samples": encoded,
        "options": {"allow_masked_generated": allow_masked_generated},
    }
    if layout is not None:
        body["layout"] = layout
    request = urllib.request.Request(url + "/admin/audit", data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as err:
        raise ValueError(f"the audit refused the samples: {_error_message(err.read())}") from None
    problems = [Problem(**p) for p in answer.pop("problems")]
    return AuditReport(problems=problems, **answer)


def _error_message(body: bytes) -> str:
    """The message of an error answer, in either of SGLang's shapes (``{"message"}``, ``{"error": {"message"}}``);
    the body as text when it has neither."""
    text = body.decode("utf-8", "replace")
    try:
        answer = json.loads(text)
    except ValueError:
        return text
    if isinstance(answer, dict):
        error = answer.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error, str):
            return error
        if isinstance(answer.get("message"), str):
            return answer["message"]
    return text
