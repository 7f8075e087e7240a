"""Valid JSON never produces a 5xx: out-of-range numbers, reserved template arguments, deep
nesting, too many sequences, unbounded lists and strings, each against a real Daphne + engine.

Each bad body gets a 400 in OpenAI's format naming the parameter; the values at the edge of
each range go through to the engine and come back 200; and the platform serves the next
request as if nothing happened.
"""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = [pytest.mark.faults, pytest.mark.slow]

USER = [{"role": "user", "content": "hi"}]
DEEP = 100_000


def _chat(**fields) -> dict:
    return {"model": "tiny-llama", "messages": USER, "max_tokens": 2, **fields}


def _completion(**fields) -> dict:
    return {"model": "tiny-llama", "prompt": "Once", "max_tokens": 2, **fields}


def _deep_body() -> bytes:
    # Built as bytes: json.dumps would itself hit the recursion limit.
    nested = b"[" * DEEP + b"]" * DEEP
    return b'{"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], ' + (
        b'"chat_template_kwargs": {"x": ' + nested + b"}}"
    )


# (endpoint, body (a dict, or raw bytes), the param the 400 names, None when it is the body)
BAD = {
    "seed over uint64": ("/v1/chat/completions", _chat(seed=2**64), "seed"),
    "seed under int64": ("/v1/chat/completions", _chat(seed=-(2**63) - 1), "seed"),
    "top_k over 64 bits": ("/v1/chat/completions", _chat(top_k=2**63), "top_k"),
    "top_k over int32": ("/v1/completions", _completion(top_k=2**31), "top_k"),
    "priority over 64 bits": ("/v1/chat/completions", _chat(priority=2**64), "priority"),
    "priority over int32": ("/v1/completions", _completion(priority=-(2**31) - 1), "priority"),
    "max_tokens over 64 bits": ("/v1/completions", _completion(max_tokens=2**64), "max_tokens"),
    "min_tokens over 64 bits": ("/v1/chat/completions", _chat(min_tokens=2**70), "min_tokens"),
    "repetition_penalty huge": (
        "/v1/chat/completions",
        _chat(repetition_penalty=1e30),
        "repetition_penalty",
    ),
    "template kwargs replace messages": (
        "/v1/chat/completions",
        _chat(chat_template_kwargs={"messages": []}),
        "chat_template_kwargs",
    ),
    "template kwargs replace add_generation_prompt": (
        "/v1/chat/completions",
        _chat(chat_template_kwargs={"add_generation_prompt": False}),
        "chat_template_kwargs",
    ),
    "template kwargs replace bos_token": (
        "/v1/chat/completions",
        _chat(chat_template_kwargs={"bos_token": "<s>"}),
        "chat_template_kwargs",
    ),
    "tokenize template kwargs replace messages": (
        "/tokenize",
        {"model": "tiny-llama", "messages": USER, "chat_template_kwargs": {"messages": []}},
        "chat_template_kwargs",
    ),
    "body nested 100,000 deep": ("/v1/chat/completions", _deep_body(), None),
    "array nested 100,000 deep": ("/v1/completions", b"[" * DEEP + b"]" * DEEP, None),
    "NaN is not JSON": (
        "/v1/chat/completions",
        b'{"model": "tiny-llama", "messages": [], "temperature": NaN}',
        None,
    ),
    "1,000 prompts x n=128": (
        "/v1/completions",
        _completion(prompt=["Once"] * 1000, n=128),
        "n",
    ),
    "257 prompts": ("/v1/completions", _completion(prompt=["Once"] * 257), "prompt"),
    "100 stop strings": ("/v1/chat/completions", _chat(stop=["x"] * 100), "stop"),
    "a 10,000-character stop string": ("/v1/chat/completions", _chat(stop="x" * 10_000), "stop"),
    "5,000 stop_token_ids": (
        "/v1/chat/completions",
        _chat(stop_token_ids=[1] * 5000),
        "stop_token_ids",
    ),
    "3,000 messages": ("/v1/chat/completions", _chat(messages=USER * 3000), "messages"),
    "a 10,000-character model name": ("/v1/chat/completions", _chat(model="m" * 10_000), "model"),
    "a 10,000-character message name": (
        "/v1/chat/completions",
        _chat(messages=[{"role": "user", "content": "hi", "name": "n" * 10_000}]),
        "messages[0].name",
    ),
    "a 10,000-character cache_salt": (
        "/v1/chat/completions",
        _chat(cache_salt="s" * 10_000),
        "cache_salt",
    ),
    "a lone surrogate in the content": (
        "/v1/chat/completions",
        _chat(messages=[{"role": "user", "content": "hi \ud800"}]),
        "messages[0].content",
    ),
    "a lone surrogate in cache_salt": (
        "/v1/chat/completions",
        _chat(cache_salt="\udfff"),
        "cache_salt",
    ),
    "a lone surrogate in the prompt": (
        "/v1/completions",
        _completion(prompt=["ok", "\ud800"]),
        "prompt[1]",
    ),
    "3,000 embedding inputs": (
        "/v1/embeddings",
        {"model": "minilm", "input": ["x"] * 3000},
        "input",
    ),
    "detokenize a 70-bit id": (
        "/detokenize",
        {"model": "tiny-llama", "tokens": [1, 2**70]},
        "tokens[1]",
    ),
}

# Values at the edge of each range: the engine takes them.
EDGE = {
    "seed at int64 max, two samples": ("/v1/completions", _completion(seed=2**63 - 1, n=2)),
    "seed at int64 min": ("/v1/chat/completions", _chat(seed=-(2**63))),
    "top_k at int32 max": ("/v1/chat/completions", _chat(top_k=2**31 - 1, temperature=1.0)),
    "priority at int32 max": ("/v1/chat/completions", _chat(priority=2**31 - 1)),
    "priority at int32 min": ("/v1/completions", _completion(priority=-(2**31))),
    "the most sequences": ("/v1/completions", _completion(prompt=["Once"] * 2, n=128)),
    "a template argument of its own": (
        "/v1/chat/completions",
        _chat(chat_template_kwargs={"enable_thinking": False}),
    ),
}


def _post(platform, path: str, body: dict | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{platform.base_url}{path}",
        content=content,
        headers={"Authorization": f"Bearer {platform.api_key}", "Content-Type": "application/json"},
        timeout=120,
    )


@pytest.mark.parametrize(("path", "body", "param"), list(BAD.values()), ids=list(BAD))
def test_bad_values_are_a_400_naming_the_param(platform, path, body, param):
    response = _post(platform, path, body)
    assert response.status_code == 400, response.text[:500]
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param, error
    assert error["message"]


@pytest.mark.parametrize(("path", "body"), list(EDGE.values()), ids=list(EDGE))
def test_values_at_the_edge_of_each_range_reach_the_engine(platform, path, body):
    response = _post(platform, path, body)
    assert response.status_code == 200, response.text[:500]
    prompts = body["prompt"] if isinstance(body.get("prompt"), list) else [None]
    assert len(response.json()["choices"]) == body.get("n", 1) * len(prompts)


@pytest.mark.parametrize(
    "body",
    [b"--abc--\r\n", b"--abc\r\nno headers at all\r\n--abc--\r\n", b"not multipart"],
    ids=["no parts", "a part without headers", "no framing"],
)
def test_a_malformed_upload_gets_the_api_error_not_a_bare_400(platform, body):
    # Twisted under Daphne used to parse multipart bodies itself (the whole upload in memory)
    # and answer a malformed one with an empty 400 (controlplane/common/daphne_bodies.py).
    response = httpx.post(
        f"{platform.base_url}/v1/files",
        content=body,
        headers={
            "Authorization": f"Bearer {platform.api_key}",
            "Content-Type": "multipart/form-data; boundary=abc",
        },
        timeout=30,
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_after_every_fault_the_platform_serves_as_before(platform):
    # Run last in this module: the faults above left neither the API nor the engine worse.
    for name, (path, body, _param) in BAD.items():
        assert _post(platform, path, body).status_code == 400, name
    assert httpx.get(f"{platform.base_url}/health", timeout=10).status_code == 200
    reply = platform.sdk().chat.completions.create(
        model=platform.chat_model, messages=USER, max_tokens=4
    )
    assert reply.choices[0].finish_reason in ("stop", "length")
    completion = platform.sdk().completions.create(
        model=platform.chat_model, prompt=["Once", "Twice"], n=2, max_tokens=2
    )
    assert len(completion.choices) == 4
