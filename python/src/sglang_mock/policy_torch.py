"""The toy policy as a torch module and as a Hugging Face causal LM (``pip install sglang-mock[torch]``).

:class:`ToyPolicyModule` is a ``torch.nn.Module`` whose one parameter is ``logit_offsets`` (MODEL.md section 14):
its ``token_logprobs`` are the served logprobs, differentiable, so autograd gives the exact gradient of any loss
built on them. :class:`SglangMockPolicyForCausalLM` is the same model as a ``transformers`` ``PreTrainedModel``:
``forward(input_ids, attention_mask)`` returns the logits over the whole vocabulary, and ``save_pretrained(DIR)``
writes a directory that ``sglang-mock --model-path DIR`` serves and ``/update_weights_from_disk`` loads, and that
``AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`` loads back. A trainer that loads its actor by
path runs its own recompute path on the toy policy unchanged::

    model = SglangMockPolicyForCausalLM(SglangMockPolicyConfig())
    model.save_pretrained("ckpt/step-0")                       # serve it: sglang-mock --model-path ckpt/step-0
    actor = AutoModelForCausalLM.from_pretrained("ckpt/step-0", trust_remote_code=True)
    logits = actor(input_ids, attention_mask=mask).logits      # [batch, seq, vocab]
    logprobs = torch.log_softmax(logits[:, :-1] / temperature, -1).gather(-1, input_ids[:, 1:, None])

Where a row's ``attention_mask`` is 0 the token is padding: it is in no context (the toy model's context is the
tokens themselves, not their positions), and its logits are the tail's everywhere. Logits are computed in float64
and returned in the parameter's dtype.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import nn

from .policy import DEFAULT_VOCAB_SIZE, OFFSET_MAX, OFFSET_MIN, SLOTS, TAIL_LOGIT, Policy, ToyPolicy

__all__ = ["SglangMockPolicyConfig", "SglangMockPolicyForCausalLM", "ToyPolicyModule"]


def _explicit_logits(offsets: torch.Tensor, tokens, ends, seed: int, vocab_size: int):
    """The nine slot ids and their logits (float64, differentiable in ``offsets``) at the contexts
    ``tokens[:end]``: ``ln(w_s) + clamp(θ[bucket][s])``, with a zero row adding exactly nothing."""
    core = ToyPolicy(Policy.zero(offsets.shape[0]), seed=seed, vocab_size=vocab_size)
    ids, weights, buckets = core.base(np.asarray(tokens, dtype=np.int64), np.asarray(ends, dtype=np.int64))
    theta = offsets.to(torch.float64)
    rows = torch.clamp(theta, OFFSET_MIN, OFFSET_MAX)[torch.from_numpy(buckets)]
    logits = torch.from_numpy(np.log(weights)) + rows
    return torch.from_numpy(ids), logits


class ToyPolicyModule(nn.Module):
    """The toy policy with ``logit_offsets`` as a parameter; ``seed`` and ``vocab_size`` are the server's."""

    def __init__(self, policy: Optional[Policy] = None, seed: int = 0, vocab_size: int = DEFAULT_VOCAB_SIZE):
        super().__init__()
        policy = policy if policy is not None else Policy.zero()
        self.logit_offsets = nn.Parameter(torch.tensor(policy.offsets, dtype=torch.float32))
        self.seed = int(seed)
        self.vocab_size = int(vocab_size)

    def policy(self) -> Policy:
        """The current weights, for :meth:`Policy.save`."""
        return Policy(self.logit_offsets.detach().cpu().numpy())

    def token_logprobs(self, tokens, start: int, temperature: float = 1.0) -> torch.Tensor:
        """``log p(tokens[i] | tokens[:i])`` for ``i = start .. len(tokens) - 1`` at ``temperature`` (float64,
        differentiable), in closed form over the nine explicit ids and the ``V - 9`` tail ids."""
        tokens = np.asarray(tokens, dtype=np.int64)
        ends = np.arange(start, len(tokens))
        ids, logits = _explicit_logits(self.logit_offsets, tokens, ends, self.seed, self.vocab_size)
        scaled = logits / temperature
        tail = torch.full((len(ends), 1), TAIL_LOGIT / temperature, dtype=torch.float64)
        tail_mass = tail + float(np.log(self.vocab_size - SLOTS))
        log_z = torch.logsumexp(torch.cat([scaled, tail_mass], dim=1), dim=1)
        target = torch.from_numpy(tokens[start:])
        hit = ids == target[:, None]
        explicit = (scaled * hit).sum(dim=1)
        chosen = torch.where(hit.any(dim=1), explicit, tail[:, 0])
        return chosen - log_z

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits ``[batch, seq, vocab]``: at each position those of the next token after the row's unpadded
        tokens up to it."""
        return _full_logits(self.logit_offsets, input_ids, attention_mask, self.seed, self.vocab_size)


def _full_logits(offsets, input_ids, attention_mask, seed, vocab_size):
    batch, length = input_ids.shape
    out = torch.full((batch, length, vocab_size), TAIL_LOGIT, dtype=torch.float64)
    ids_np = input_ids.detach().cpu().numpy()
    mask_np = np.ones_like(ids_np) if attention_mask is None else attention_mask.detach().cpu().numpy()
    for row in range(batch):
        keep = np.nonzero(mask_np[row])[0]
        if len(keep) == 0:
            continue
        tokens = ids_np[row][keep]
        ids, logits = _explicit_logits(offsets, tokens, np.arange(1, len(tokens) + 1), seed, vocab_size)
        positions = torch.from_numpy(keep)[:, None].expand(-1, SLOTS)
        out = out.index_put((torch.full_like(positions, row), positions, ids), logits)
    return out.to(offsets.dtype)


try:
    from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import CausalLMOutput
except ImportError:  # transformers is optional: the module above needs torch only
    pass
else:

    class SglangMockPolicyConfig(PretrainedConfig):
        """The toy policy's ``config.json`` (MODEL.md section 14.4)."""

        model_type = "sglang_mock_policy"

        def __init__(self, num_buckets: int = 8, vocab_size: int = DEFAULT_VOCAB_SIZE, server_seed: int = 0, **kwargs):
            self.num_buckets = int(num_buckets)
            self.vocab_size = int(vocab_size)
            self.server_seed = int(server_seed)
            kwargs.setdefault("torch_dtype", "float32")
            super().__init__(**kwargs)

    class SglangMockPolicyForCausalLM(PreTrainedModel, GenerationMixin):
        """The toy policy as a causal LM: one parameter, ``logit_offsets``, which ``save_pretrained`` writes as
        the tensor ``sglang-mock`` loads."""

        config_class = SglangMockPolicyConfig
        base_model_prefix = ""
        _no_split_modules: list = []

        def __init__(self, config: SglangMockPolicyConfig):
            super().__init__(config)
            self.logit_offsets = nn.Parameter(torch.zeros(config.num_buckets, SLOTS))
            self.post_init()

        def _init_weights(self, module):
            # The all-zero policy is the base model: nothing is drawn at random.
            if module is self:
                with torch.no_grad():
                    self.logit_offsets.zero_()

        def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
            logits = _full_logits(
                self.logit_offsets, input_ids, attention_mask, self.config.server_seed, self.config.vocab_size
            )
            loss = None
            if labels is not None:
                shifted = logits[:, :-1].reshape(-1, logits.shape[-1]).float()
                loss = nn.functional.cross_entropy(shifted, labels[:, 1:].reshape(-1), ignore_index=-100)
            return CausalLMOutput(loss=loss, logits=logits)

    SglangMockPolicyConfig.register_for_auto_class()
    SglangMockPolicyForCausalLM.register_for_auto_class("AutoModelForCausalLM")
