"""The OpenAPI schema is generated from the code and describes the API's request bodies."""

from __future__ import annotations

import pytest
import yaml


@pytest.fixture
def schema(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


def test_schema_lists_the_endpoints(schema):
    for path in (
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/models",
        "/v1/models/{model_id}",
        "/tokenize",
        "/detokenize",
    ):
        assert path in schema["paths"], path


def test_schema_describes_request_bodies(schema):
    chat = schema["components"]["schemas"]["ChatCompletionRequest"]
    assert {"model", "messages"} <= set(chat["required"])
    props = chat["properties"]
    assert props["temperature"]["maximum"] == 2.0 and props["temperature"]["minimum"] == 0.0
    assert props["n"]["minimum"] == 1
    for extra in ("top_k", "min_p", "repetition_penalty", "ignore_eos", "stop_token_ids"):
        assert extra in props
    body = schema["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]
    assert list(body) == ["application/json"]
