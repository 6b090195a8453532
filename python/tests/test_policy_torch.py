"""The toy policy under torch and transformers against the server that serves it: the torch module's
differentiable logprobs and the Hugging Face class's logits give the served logprobs, autograd gives the closed-form
gradient, and ``save_pretrained`` writes a directory that the server loads and ``AutoModelForCausalLM`` loads back.

torch and transformers are optional extras of the package: these tests run in their own environment
(``scripts/test`` keeps it in ``target/py/torch-venv``) and are skipped where torch is not installed.
"""

import json
import urllib.request

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from sglang_mock import serve  # noqa: E402
from sglang_mock.policy import Policy, ToyPolicy  # noqa: E402
from sglang_mock.policy_torch import (  # noqa: E402
    SglangMockPolicyConfig,
    SglangMockPolicyForCausalLM,
    ToyPolicyModule,
)

from conftest import RELEASE, generated_ids  # noqa: E402

# A small vocabulary keeps the Hugging Face logits ([batch, seq, vocab]) small.
V = 4096
IM_START, IM_END = V - 2, V - 1
PROMPTS = [
    [IM_START, 300, 302, 304, IM_END, IM_START],
    [72, 101, 108, 343, 422],
    [IM_START, 500, IM_END, IM_START, 700, IM_END, 260, 262, IM_START],
]
SAMPLERS = [{"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9}, {"temperature": 1.3, "top_k": 4}]


def post(url, path, body):
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def corpus(url):
    """(prompt, temperature, output ids, served logprobs) over prompts, samplers and n = 2."""
    out = []
    for prompt in PROMPTS:
        for sampler in SAMPLERS:
            body = {"input_ids": prompt, "return_logprob": True,
                    "sampling_params": {**sampler, "max_new_tokens": 24, "n": 2}}
            for item in post(url, "/generate", body):
                served = np.array([row[0] for row in item["meta_info"]["output_token_logprobs"]], dtype=np.float32)
                out.append((prompt, sampler["temperature"], generated_ids(item), served))
    return out


@pytest.fixture
def policy_dir(tmp_path):
    """A Hugging Face checkpoint of a policy whose every bucket moves, written by ``save_pretrained``."""
    model = SglangMockPolicyForCausalLM(SglangMockPolicyConfig(vocab_size=V))
    with torch.no_grad():
        model.logit_offsets.copy_(torch.from_numpy(np.random.default_rng(4).uniform(-2, 4, (8, 9)).astype(np.float32)))
    model.save_pretrained(str(tmp_path / "hf"))
    return tmp_path / "hf", Policy(model.logit_offsets.detach().numpy())


def test_save_pretrained_writes_what_the_server_loads_and_auto_model_loads_back(policy_dir):
    path, policy = policy_dir
    assert Policy.load(str(path)) == policy
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(path), trust_remote_code=True)
    assert type(loaded).__name__ == "SglangMockPolicyForCausalLM"
    np.testing.assert_array_equal(loaded.logit_offsets.detach().numpy(), policy.offsets)
    with serve(model_path=str(path), vocab_size=V, sglang_version=RELEASE) as url:
        info = post(url, "/update_weights_from_disk", {"model_path": str(path), "weight_version": "hf"})
    assert info["success"] is True, info


def test_the_module_and_the_hugging_face_class_agree_with_the_server(policy_dir):
    path, policy = policy_dir
    module = ToyPolicyModule(policy, vocab_size=V)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(path), trust_remote_code=True)
    numpy_model = ToyPolicy(policy, vocab_size=V)
    worst = {"module": 0.0, "hf": 0.0}
    with serve(model_path=str(path), vocab_size=V, sglang_version=RELEASE) as url:
        rollouts = corpus(url)
    # Left-padded into one batch, as a trainer's recompute pads it, with its attention mask.
    width = max(len(p) + len(o) for p, _, o, _ in rollouts)
    ids = torch.zeros((len(rollouts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (prompt, _, output, _) in enumerate(rollouts):
        tokens = prompt + output
        ids[row, width - len(tokens):] = torch.tensor(tokens)
        mask[row, width - len(tokens):] = 1
    with torch.no_grad():
        logits = hf(input_ids=ids, attention_mask=mask).logits
    for row, (prompt, temperature, output, served) in enumerate(rollouts):
        tokens = prompt + output
        np.testing.assert_array_equal(numpy_model.logprobs(tokens, len(prompt), temperature), served)
        mine = module.token_logprobs(tokens, len(prompt), temperature).detach().numpy().astype(np.float32)
        worst["module"] = max(worst["module"], float(np.max(np.abs(mine - served))))
        start = width - len(tokens) + len(prompt)
        lp = torch.log_softmax(logits[row, start - 1:width - 1].double() / temperature, dim=-1)
        theirs = lp.gather(-1, torch.tensor(output)[:, None])[:, 0].numpy().astype(np.float32)
        worst["hf"] = max(worst["hf"], float(np.max(np.abs(theirs - served))))
    print(f"max |Δ| against the server over {sum(len(r[2]) for r in rollouts)} tokens: {worst}")
    # Rounding to float32 only: a few ulps of values of magnitude up to about 20.
    assert worst["module"] <= 1e-5 and worst["hf"] <= 1e-5, worst


def test_autograd_gives_the_closed_form_gradient():
    policy = Policy(np.random.default_rng(9).uniform(-1.5, 3.0, (8, 9)).astype(np.float32))
    tokens = [IM_START] + [int(t) for t in np.random.default_rng(1).integers(256, V - 4, 50)]
    weights = np.random.default_rng(2).normal(size=len(tokens) - 3)
    for temperature in (1.0, 0.7):
        module = ToyPolicyModule(policy, vocab_size=V)
        loss = (module.token_logprobs(tokens, 3, temperature) * torch.from_numpy(weights)).sum()
        loss.backward()
        _, closed = ToyPolicy(policy, vocab_size=V).logprobs_and_grad(tokens, 3, temperature, weights)
        # The gradient is exact in float64 and stored in the float32 parameter's .grad: one rounding apart.
        np.testing.assert_allclose(module.logit_offsets.grad.numpy(), closed.astype(np.float32), rtol=1e-7, atol=1e-12)


def test_padding_without_an_attention_mask_changes_the_logits():
    """The recompute bug a trainer ships when it pads and forgets the mask: the pads enter the context."""
    model = SglangMockPolicyForCausalLM(SglangMockPolicyConfig(vocab_size=V))
    tokens = torch.tensor([[0, 0, IM_START, 300, 302]])
    mask = torch.tensor([[0, 0, 1, 1, 1]])
    with torch.no_grad():
        right = model(input_ids=tokens, attention_mask=mask).logits
        wrong = model(input_ids=tokens).logits
        alone = model(input_ids=tokens[:, 2:]).logits
    torch.testing.assert_close(right[:, 2:], alone, rtol=0, atol=0)
    assert not torch.equal(right[:, 2:], wrong[:, 2:])
