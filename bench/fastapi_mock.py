"""A FastAPI + uvicorn + orjson stand-in for SGLang's /generate, written the way Python RL projects write mocks.

It exists only as the baseline of `loopback.py`: it answers `/generate` with the same response format as
`sglang-mock` (text, output_ids and meta_info with `output_token_logprobs` triples), drawing random token ids and
logprobs per request, and serialises with orjson, the fastest JSON library Python has. It runs on uvloop and
httptools, uvicorn's fastest configuration, so the comparison is against the best case for Python.

    python bench/fastapi_mock.py --port 30001
"""

import argparse
import random
import time
import uuid

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

app = FastAPI()
VOCAB = 151_936
EOS = VOCAB - 1


@app.get("/health")
async def health() -> Response:
    return Response(status_code=200)


@app.post("/generate")
async def generate(request: Request) -> Response:
    started = time.perf_counter()
    body = orjson.loads(await request.body())
    params = body.get("sampling_params") or {}
    max_new_tokens = params.get("max_new_tokens", 128)
    ids = [random.randrange(VOCAB) for _ in range(max_new_tokens)]
    meta = {
        "id": body.get("rid") or uuid.uuid4().hex,
        "finish_reason": {"type": "length", "length": max_new_tokens},
        "prompt_tokens": len(body.get("input_ids") or []) or 5,
        "weight_version": "default",
    }
    if body.get("return_logprob"):
        meta["input_token_logprobs"] = []
        meta["output_token_logprobs"] = [[-random.expovariate(1.0), i, None] for i in ids]
    meta["completion_tokens"] = max_new_tokens
    meta["cached_tokens"] = 0
    meta["e2e_latency"] = time.perf_counter() - started
    out = {"text": " lorem" * max_new_tokens, "output_ids": ids, "meta_info": meta}
    return Response(content=orjson.dumps(out), media_type="application/json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30001)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                loop="uvloop", http="httptools")


if __name__ == "__main__":
    main()
