"""Small stand-ins for the public sample types of the RL frameworks whose bugs ``test_witness_cases.py``
reproduces. Each keeps the upstream field names, types and defaults of the fields a rollout fills, and drops the
rest (multimodal data, statistics, tokenizers), so that the audit reads them exactly as it reads the real ones.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict


@dataclass
class Sample:
    """slime's ``Sample`` (``slime/utils/types.py``, ``@dataclass class Sample``, THUDM/slime ``624b824a8``).

    ``tokens`` is the prompt then the response; ``response_length``, ``loss_mask`` and ``rollout_log_probs`` cover
    the response only (tool tokens: mask 0, logprob 0.0); ``rollout_routed_experts`` has ``len(tokens) - 1``
    rows of ``[num_layers, moe_router_topk]``, the prompt included. A ``loss_mask`` of ``None`` means every
    response token is trained (``_convert_samples_to_train_data``). miles' ``Sample`` (``miles/utils/types.py``,
    radixark/miles) is a fork with these same fields, its routes a NumPy int32 array.
    """

    group_index: Optional[int] = None
    index: Optional[int] = None
    prompt: Any = ""
    tokens: list = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: Optional[str] = None
    reward: Any = None
    loss_mask: Optional[list] = None
    weight_versions: list = field(default_factory=list)
    rollout_log_probs: Optional[list] = None
    rollout_routed_experts: Any = None

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)

    def to_dict(self):
        # As upstream: a shallow copy of the attributes (unknown ones included), the status as its value.
        value = self.__dict__.copy()
        value["status"] = self.status.value
        return value

    def append_response_tokens(self, args=None, *, tokens=None, log_probs=None, trainable=True, meta_info=None,
                               text=None, update_terminal_info=True):
        """``Sample.append_response_tokens`` at THUDM/slime ``624b824a8``, without top-p replay and speculative
        statistics: tokens, mask and logprobs appended together, then the answer's routes and terminal fields."""
        tokens = list(tokens or [])
        log_probs = None if log_probs is None else list(log_probs)
        if log_probs is not None and len(log_probs) != len(tokens):
            raise ValueError(f"log_probs length {len(log_probs)} != tokens length {len(tokens)}")
        if tokens and trainable and log_probs is None:
            raise ValueError("trainable response tokens require rollout log probabilities.")
        if tokens and not trainable:
            log_probs = [0.0] * len(tokens)
        if text is not None:
            self.response += text
        previous_response_length = self.response_length
        if tokens:
            self.tokens += tokens
            self.response_length += len(tokens)
            if self.loss_mask is None:
                self.loss_mask = [1] * previous_response_length
            self.loss_mask += [1 if trainable else 0] * len(tokens)
        if log_probs is not None:
            if self.rollout_log_probs is None:
                self.rollout_log_probs = [0.0] * previous_response_length
            self.rollout_log_probs += log_probs
        if meta_info is not None:
            self._apply_meta_info(args, meta_info, update_terminal_info=update_terminal_info)

    def _apply_meta_info(self, args, meta_info, *, update_terminal_info=True):
        routed = meta_info.get("routed_experts")
        if routed is not None:
            routes = np.frombuffer(base64.b64decode(routed), dtype=np.int32)
            start_len = int(meta_info.get("routed_experts_start_len", 0) or 0)
            expected_rows = max(0, len(self.tokens) - 1 - start_len)
            if routes.size != expected_rows * args.num_layers * args.moe_router_topk:
                raise ValueError("SGLang routed_experts element count does not match sample tokens")
            routes = routes.reshape(expected_rows, args.num_layers, args.moe_router_topk)
            if start_len == 0:
                self.rollout_routed_experts = routes
            else:
                self.rollout_routed_experts = np.concatenate([self.rollout_routed_experts[:start_len], routes])
        if not update_terminal_info or "finish_reason" not in meta_info:
            return
        if "weight_version" in meta_info:
            self.weight_versions.append(meta_info["weight_version"])
        self.status = {"length": Sample.Status.TRUNCATED, "abort": Sample.Status.ABORTED,
                       "stop": Sample.Status.COMPLETED}[meta_info["finish_reason"]["type"]]


class AgentLoopMetrics(BaseModel):
    """verl's ``AgentLoopMetrics`` (``verl/experimental/agent_loop/agent_loop.py``, verl-project/verl
    ``1dda039b``)."""

    generate_sequences: float = 0.0
    tool_calls: float = 0.0
    compute_score: float = 0.0
    num_preempted: int = -1


class AgentLoopOutput(BaseModel):
    """verl's ``AgentLoopOutput`` (``verl/experimental/agent_loop/agent_loop.py``, verl-project/verl
    ``1dda039b``): ``response_ids`` holds the generated and the tool tokens after the prompt, ``response_mask``
    is 1 for generated tokens, ``response_logprobs`` is 0.0 at mask-0 positions, ``routed_experts`` covers the
    whole sequence."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: Optional[list[float]] = None
    routed_experts: Optional[Any] = None
    reward_score: Optional[float] = None
    num_turns: int = 0
    metrics: AgentLoopMetrics
    extra_fields: dict[str, Any] = {}


class TokenOutput(BaseModel):
    """verl's ``TokenOutput`` (``verl/workers/rollout/replica.py``, verl-project/verl ``1dda039b``): one
    generation as a backend returns it to an agent loop or gateway; ``log_probs`` is ``None`` when the backend
    sent none."""

    token_ids: list[int]
    log_probs: Optional[list[float]] = None
    routed_experts: Optional[Any] = None
    stop_reason: Optional[str] = None
    extra_fields: dict[str, Any] = {}


@dataclass
class ModelResponse:
    """AReaL's ``ModelResponse`` (``areal/api/io_struct.py``, inclusionAI/AReaL ``4aef98d8``): every output token
    is trained, ``output_versions`` is one weight version (an int) per output token."""

    input_tokens: list = field(default_factory=list)
    output_tokens: list = field(default_factory=list)
    output_logprobs: list = field(default_factory=list)
    output_versions: list = field(default_factory=list)
    stop_reason: str = "stop"
    routed_experts: Any = None

    @property
    def input_len(self) -> int:
        return len(self.input_tokens)

    @property
    def output_len(self) -> int:
        return len(self.output_tokens)
