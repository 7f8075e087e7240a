"""/v1/embeddings through the OpenAI SDK, served by a pooling engine running all-MiniLM-L6-v2."""

from __future__ import annotations

import base64
import math
import struct
import time

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.fixture
def client(api_platform, pooling_engine):
    return openai.OpenAI(base_url=f"{api_platform.base_url}/v1", api_key=api_platform.api_key)


def test_similar_meanings_are_closer(client, api_platform):
    response = client.embeddings.create(
        model=api_platform.embed_model, input=["a cat", "a kitten", "a quarterly tax report"]
    )
    cat, kitten, tax = (item.embedding for item in response.data)
    assert [item.index for item in response.data] == [0, 1, 2]
    assert len(cat) == 384
    assert math.isclose(math.sqrt(sum(x * x for x in cat)), 1.0, rel_tol=1e-4)
    assert _cosine(cat, kitten) > _cosine(cat, tax)
    assert response.usage.prompt_tokens == response.usage.total_tokens > 6


def test_base64_matches_float(client, api_platform):
    floats = client.embeddings.create(model=api_platform.embed_model, input="a cat")
    raw = httpx.post(
        f"{api_platform.base_url}/v1/embeddings",
        json={"model": api_platform.embed_model, "input": "a cat", "encoding_format": "base64"},
        headers={"Authorization": f"Bearer {api_platform.api_key}"},
    ).json()
    packed = base64.b64decode(raw["data"][0]["embedding"])
    decoded = struct.unpack(f"<{len(packed) // 4}f", packed)
    assert decoded == pytest.approx(floats.data[0].embedding, abs=1e-6)


def test_sdk_base64_default_and_token_inputs(client, api_platform):
    # The SDK asks for base64 by default when numpy is around and decodes it itself; token-id
    # inputs embed the same as the text they encode.
    text = client.embeddings.create(model=api_platform.embed_model, input="a kitten")
    ids = httpx.post(
        f"{api_platform.base_url}/tokenize",
        json={"model": api_platform.embed_model, "prompt": "a kitten"},
        headers={"Authorization": f"Bearer {api_platform.api_key}"},
    ).json()["tokens"]
    by_ids = client.embeddings.create(model=api_platform.embed_model, input=[ids])
    assert by_ids.data[0].embedding == pytest.approx(text.data[0].embedding, abs=1e-5)


def test_bad_embedding_requests(client, api_platform):
    with pytest.raises(openai.BadRequestError) as too_long:
        client.embeddings.create(model=api_platform.embed_model, input="word " * 400)
    assert "256" in str(too_long.value) and too_long.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as chat_model:
        client.embeddings.create(model=api_platform.chat_model, input="a cat")
    assert chat_model.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as dims:
        client.embeddings.create(model=api_platform.embed_model, input="a cat", dimensions=10)
    assert dims.value.body["param"] == "dimensions"


def test_the_usage_record_names_the_requests_end_user(client, api_platform):
    before = len(api_platform.usage_events())
    client.embeddings.create(model=api_platform.embed_model, input="a cat", user="carol")
    client.embeddings.create(model=api_platform.embed_model, input="a dog")
    deadline = time.monotonic() + 5  # usage is queued in the background of each request
    while True:
        events = api_platform.usage_events()[before:]
        mine = sorted(e.end_user for e in events if e.model == api_platform.embed_model)
        if len(mine) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert mine == ["", "carol"]
