"""lm-eval's ``local-completions`` model (``LocalCompletionsAPI``) against the mock's ``/v1/completions``.

``loglikelihood`` sends context plus continuation with ``echo`` and ``logprobs`` and sums the continuation's
prompt logprobs; ``generate_until`` sends ``stop``. Both are checked against the native ``/generate`` answer for
the same token ids, computed here without lm-eval.

lm-eval needs a tokenizer that agrees with the server's to find where the continuation starts. With a real
model that is the Hugging Face tokenizer; the toy model's lives in the server, so ``ServerTokenizer`` reads it
through SGLang's ``/tokenize`` and ``/detokenize``. (lm-eval's own ``remote`` tokenizer expects vLLM's
variant of those routes, with ``/tokenizer_info``, which SGLang does not serve.)
"""

import pytest
import requests
from lm_eval.api.instance import Instance
from lm_eval.models.openai_completions import LocalCompletionsAPI


class ServerTokenizer:
    """The server's tokenizer through ``/tokenize`` and ``/detokenize``, with the methods lm-eval calls."""

    eos_token = "<|im_end|>"
    bos_token = None

    def __init__(self, url):
        self.url = url

    def encode(self, text):
        if not isinstance(text, str):
            return [self.encode(t) for t in text]
        reply = requests.post(f"{self.url}/tokenize", json={"prompt": text, "add_special_tokens": False})
        reply.raise_for_status()
        return reply.json()["tokens"]

    def decode(self, ids):
        reply = requests.post(f"{self.url}/detokenize", json={"tokens": ids})
        reply.raise_for_status()
        return reply.json()["text"]

    def batch_decode(self, lists):
        return [self.decode(ids) for ids in lists]

    @property
    def eos_token_id(self):
        return self.encode(self.eos_token)[0]

    bos_token_id = None


def local_completions(url):
    """lm-eval's ``local-completions`` model with the server's tokenizer."""
    model = LocalCompletionsAPI(base_url=f"{url}/v1/completions", model="sglang-mock/toy-model",
                                tokenizer_backend=None, max_retries=1, max_gen_toks=24)
    # The remote-tokenizer code path of TemplateAPI, with the tokenizer above.
    model.tokenizer_backend = "remote"
    model.tokenized_requests = True
    model.tokenizer = ServerTokenizer(url)
    return model


def native(url, body):
    reply = requests.post(f"{url}/generate", json=body)
    reply.raise_for_status()
    return reply.json()


def prompt_logprobs(url, ids):
    """``/generate``'s logprob of every prompt token after the first, with the top-1 id at each position."""
    meta = native(url, {"input_ids": ids, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
                        "logprob_start_len": 0, "top_logprobs_num": 1})["meta_info"]
    return meta["input_token_logprobs"], meta["input_top_logprobs"]


def test_loglikelihood_is_the_sum_of_generates_continuation_logprobs(sglang_mock):
    model = local_completions(sglang_mock)
    tok = ServerTokenizer(sglang_mock)
    context = "Question: what is the capital of France?\nAnswer:"
    greedy = native(sglang_mock, {"text": context, "sampling_params": {"max_new_tokens": 3, "temperature": 0}})
    cases = [(context, greedy["text"]), (context, " Paris"), ("The sky is", " green")]
    requests_ = [Instance(request_type="loglikelihood", doc={}, arguments=case, idx=i)
                 for i, case in enumerate(cases)]
    results = model.loglikelihood(requests_)
    for (ctx, continuation), (logprob, is_greedy) in zip(cases, results):
        whole = tok.encode(ctx + continuation)
        ctxlen = len(tok.encode(ctx))
        entries, tops = prompt_logprobs(sglang_mock, whole)
        expected = 0.0
        for entry in entries[ctxlen:]:
            expected += entry[0]
        assert logprob == expected, (ctx, continuation)
        assert is_greedy == all(top[0][1] == entry[1] for entry, top in zip(entries[ctxlen:], tops[ctxlen:]))
    assert results[0][1] is True, "the greedy continuation is greedy"
    assert results[2][0] < results[0][0] < 0


@pytest.mark.parametrize("until", [["\n"], [" ka", "."]])
def test_generate_until_stops_where_generate_stops(sglang_mock, until):
    model = local_completions(sglang_mock)
    context = "Once upon a time"
    [out] = model.generate_until([
        Instance(request_type="generate_until", doc={}, arguments=(context, {"until": until, "max_gen_toks": 24}),
                 idx=0)
    ])
    want = native(sglang_mock, {"text": context, "sampling_params": {
        "max_new_tokens": 24, "temperature": 0, "stop": until + ["<|im_end|>"]}})
    assert out == want["text"]
    assert not any(stop in out for stop in until)
