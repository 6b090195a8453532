"""Strict validation of OpenAI answers with the ``openai`` SDK's own pydantic types.

The SDK's normal path builds its objects without validating them, so these helpers validate every body and
stream chunk in pydantic's strict mode. The SDK's ``Completion`` type, shared by whole and streamed answers,
says ``finish_reason`` is never null and no logprob is null; OpenAI's streamed completions (and SGLang's) send
``null`` until the last chunk, and an echoed prompt's first token has no logprob. Those two places, and only
those, are validated against subclasses that allow ``null`` there. ``finish_reason: "abort"`` is SGLang's
extension and fails validation, as it would against SGLang. So does ``metadata.weight_versions``: SGLang 0.5.23
puts its list of ``{"version", "start", "end"}`` spans in ``metadata`` (``build_endpoint_weight_version_metadata``),
which the SDK types as ``Dict[str, str]``; the spans are checked for their own shape and the rest of the answer
strictly.
"""

import json
from typing import List, Literal, Optional

import httpx
from openai.types import Completion, CompletionChoice
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion_choice import Logprobs


class StreamedCompletionChoice(CompletionChoice):
    finish_reason: Optional[Literal["stop", "length", "content_filter"]] = None


class StreamedCompletion(Completion):
    choices: List[StreamedCompletionChoice]


class EchoLogprobs(Logprobs):
    token_logprobs: Optional[List[Optional[float]]] = None
    top_logprobs: Optional[List[Optional[dict]]] = None


class EchoChoice(CompletionChoice):
    logprobs: Optional[EchoLogprobs] = None


class EchoCompletion(Completion):
    choices: List[EchoChoice]


def body_type(path, request):
    if path.endswith("/chat/completions"):
        return ChatCompletion
    return EchoCompletion if request.get("echo") else Completion


def chunk_type(path):
    return ChatCompletionChunk if path.endswith("/chat/completions") else StreamedCompletion


def strict(model, payload):
    """Validate ``payload`` with ``model`` in pydantic's strict mode and return it unchanged."""
    checked = payload
    spans = (payload.get("metadata") or {}).get("weight_versions") if isinstance(payload, dict) else None
    if spans is not None:
        assert isinstance(spans, list) and spans, spans
        end = 0
        for span in spans:
            assert set(span) == {"version", "start", "end"} and isinstance(span["version"], str), span
            assert span["start"] == end and span["end"] >= span["start"], spans
            end = span["end"]
        checked = {**payload, "metadata": {k: v for k, v in payload["metadata"].items() if k != "weight_versions"}}
    model.model_validate(checked, strict=True)
    return payload


def post(url, path, request, validate=True):
    """A whole answer from an OpenAI route, validated strictly unless ``validate`` is false."""
    response = httpx.post(f"{url}{path}", json=request, timeout=30)
    assert response.status_code == 200, response.text
    answer = response.json()
    return strict(body_type(path, request), answer) if validate else answer


def stream(url, path, request):
    """The chunks of a streamed answer (which must end with ``[DONE]``), each validated strictly."""
    events = []
    with httpx.stream("POST", f"{url}{path}", json={**request, "stream": True}, timeout=30) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line:
                assert line.startswith("data: "), line
                events.append(line[len("data: "):])
    assert events[-1] == "[DONE]"
    return [strict(chunk_type(path), json.loads(e)) for e in events[:-1]]
