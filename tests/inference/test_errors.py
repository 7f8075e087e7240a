"""Bad requests get OpenAI's error body and status, and never reach the engine."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.api_platform import IDLE_MODEL, MAX_MODEL_LEN, counter_growth

USER = [{"role": "user", "content": "hello"}]


def _post(platform, path: str, *, json=None, content=None, key: str | None = None):
    headers = {"Authorization": f"Bearer {key or platform.api_key}"}
    if content is not None:
        headers["Content-Type"] = "application/json"
    return httpx.post(
        f"{platform.base_url}{path}", json=json, content=content, headers=headers, timeout=30
    )


def _assert_error(response, status: int, *, param=None, code=None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    return error


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "tiny-llama", "messages": "hello"}, "messages"),
        ({"model": "tiny-llama", "messages": USER, "temperature": "hot"}, "temperature"),
        ({"model": "tiny-llama", "messages": USER, "max_tokens": "10"}, "max_tokens"),
        ({"model": "tiny-llama", "messages": USER, "stream": "yes"}, "stream"),
        ({"model": "tiny-llama", "messages": USER, "temperature": 2.5}, "temperature"),
        ({"model": "tiny-llama", "messages": USER, "temperature": -0.1}, "temperature"),
        ({"model": "tiny-llama", "messages": USER, "top_p": 0}, "top_p"),
        ({"model": "tiny-llama", "messages": USER, "n": 0}, "n"),
        ({"model": "tiny-llama", "messages": USER, "max_tokens": 0}, "max_tokens"),
        (
            {"model": "tiny-llama", "messages": USER, "max_completion_tokens": -1},
            "max_completion_tokens",
        ),
        ({"model": "tiny-llama", "messages": []}, "messages"),
        (
            {"model": "tiny-llama", "messages": [{"role": "wizard", "content": "x"}]},
            "messages[0].role",
        ),
        ({"model": "tiny-llama", "messages": USER, "stop": 5}, "stop"),
        (
            {"model": "tiny-llama", "messages": USER, "response_format": {"type": "xml"}},
            "response_format.type",
        ),
        ({"model": "tiny-llama", "messages": USER, "stop_token_ids": [10**9]}, "stop_token_ids"),
        (
            {"model": "tiny-llama", "messages": USER, "min_tokens": 50, "max_tokens": 5},
            "min_tokens",
        ),
        ({"messages": USER}, "model"),
    ],
)
def test_invalid_chat_bodies_name_the_field(platform, body, param):
    _assert_error(_post(platform, "/v1/chat/completions", json=body), 400, param=param)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "tiny-llama", "prompt": ""}, "prompt"),
        ({"model": "tiny-llama", "prompt": [1, "a"]}, "prompt"),
        ({"model": "tiny-llama", "prompt": [[1, 2], []]}, "prompt"),
        ({"model": "tiny-llama", "prompt": [10**9]}, "prompt"),
        ({"model": "tiny-llama", "prompt": "x", "logprobs": 21}, "logprobs"),
        ({"model": "tiny-llama", "prompt": "x", "n": 0}, "n"),
    ],
)
def test_invalid_completion_bodies_name_the_field(platform, body, param):
    _assert_error(_post(platform, "/v1/completions", json=body), 400, param=param)


def test_malformed_json(platform):
    error = _assert_error(_post(platform, "/v1/chat/completions", content=b'{"model": '), 400)
    assert "JSON" in error["message"]
    _assert_error(_post(platform, "/v1/completions", content=b"[1, 2]"), 400)


def test_unknown_and_ungranted_models_are_404(platform):
    body = {"model": "no-such-model", "messages": USER}
    _assert_error(_post(platform, "/v1/chat/completions", json=body), 404, code="model_not_found")
    # The limited tenant may use only the chat model: the embedding model is "not found" too.
    hidden = {"model": "minilm", "input": "a cat"}
    error = _assert_error(
        _post(platform, "/v1/embeddings", json=hidden, key=platform.limited_key),
        404,
        code="model_not_found",
    )
    unknown = _assert_error(
        _post(
            platform, "/v1/embeddings", json={**hidden, "model": "zzz"}, key=platform.limited_key
        ),
        404,
    )
    assert error["message"].replace("minilm", "X") == unknown["message"].replace("zzz", "X")


def test_prompt_over_the_context_length(platform):
    tokens = httpx.post(
        f"{platform.base_url}/tokenize",
        json={"model": "tiny-llama", "prompt": "hello " * 1500},
        headers={"Authorization": f"Bearer {platform.api_key}"},
    ).json()["count"]
    assert tokens > MAX_MODEL_LEN
    body = {"model": "tiny-llama", "prompt": "hello " * 1500, "max_tokens": 10}
    error = _assert_error(
        _post(platform, "/v1/completions", json=body), 400, code="context_length_exceeded"
    )
    assert str(MAX_MODEL_LEN) in error["message"] and str(tokens) in error["message"]
    # Fits alone, but not with the completion asked for.
    chat = {"model": "tiny-llama", "messages": USER, "max_tokens": MAX_MODEL_LEN}
    _assert_error(_post(platform, "/v1/chat/completions", json=chat), 400, param="messages")


def test_missing_or_wrong_key_is_401(platform):
    response = httpx.get(f"{platform.base_url}/v1/models")
    _assert_error(response, 401)
    wrong = httpx.get(
        f"{platform.base_url}/v1/models", headers={"Authorization": "Bearer sk-wrong"}
    )
    _assert_error(wrong, 401, code="invalid_api_key")


def test_no_engine_for_the_model_is_503_with_retry_after(platform):
    body = {"model": IDLE_MODEL, "messages": USER, "max_tokens": 4}
    for stream in (False, True):
        response = _post(platform, "/v1/chat/completions", json={**body, "stream": stream})
        _assert_error(response, 503)
        assert int(response.headers["Retry-After"]) >= 1


def test_sdk_raises_typed_errors(platform):
    client = platform.sdk()
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="tiny-llama", messages=USER, temperature=9)
    assert bad.value.param == "temperature"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=USER)
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


def test_bad_requests_never_reach_the_engine(platform):
    """Every acceptance error case, then the engine's prompt-token counter is unchanged."""
    before = platform.wait_engine_idle()
    chat, completions = "/v1/chat/completions", "/v1/completions"
    cases = [
        (chat, b'{"model": "tiny-llama", "messages": [', 400),
        (chat, {"model": "tiny-llama", "messages": USER, "temperature": "warm"}, 400),
        (chat, {"model": "tiny-llama", "messages": USER, "temperature": 7}, 400),
        (chat, {"model": "tiny-llama", "messages": USER, "n": 0}, 400),
        (chat, {"model": "tiny-llama", "messages": USER, "max_tokens": 0}, 400),
        (chat, {"model": "nope", "messages": USER}, 404),
        (completions, {"model": "tiny-llama", "prompt": "hello " * 1500}, 400),
        (chat, {"model": "tiny-llama", "messages": []}, 400),
    ]
    for path, body, status in cases:
        if isinstance(body, bytes):
            response = _post(platform, path, content=body)
        else:
            response = _post(platform, path, json=body)
        _assert_error(response, status)
    after = platform.wait_engine_idle()
    assert counter_growth(before, after, "prompt_tokens_total") == 0
    # And the engine still serves good requests.
    reply = platform.sdk().chat.completions.create(
        model="tiny-llama", messages=USER, max_tokens=3, temperature=0
    )
    assert reply.choices[0].finish_reason in {"length", "stop"}
    assert counter_growth(after, platform.wait_engine_idle(), "prompt_tokens_total") > 0


def test_wrong_method_is_405_with_an_error_body(platform):
    response = httpx.get(
        f"{platform.base_url}/v1/completions",
        headers={"Authorization": f"Bearer {platform.api_key}"},
    )
    _assert_error(response, 405)
