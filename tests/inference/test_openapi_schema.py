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
        "/v1/rerank",
        "/v2/rerank",
        "/v1/score",
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


def test_schema_describes_the_messages_api(schema):
    create = schema["paths"]["/v1/messages"]["post"]
    assert create["operationId"] == "createMessage"
    assert {"400", "401", "404", "429"} <= set(create["responses"])
    request = schema["components"]["schemas"]["MessagesRequest"]
    assert {"model", "messages", "max_tokens"} <= set(request["required"])
    for field in ("system", "tools", "tool_choice", "stop_sequences", "thinking", "output_config"):
        assert field in request["properties"], field
    answer = create["responses"]["200"]["content"]["application/json"]["schema"]
    assert set(answer["properties"]["stop_reason"]["enum"]) == {
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
    }
    count = schema["paths"]["/v1/messages/count_tokens"]["post"]
    assert "max_tokens" not in schema["components"]["schemas"]["CountTokensRequest"]["properties"]
    assert count["responses"]["200"]["content"]["application/json"]["schema"]["required"] == [
        "input_tokens"
    ]


def test_schema_describes_rerank_and_score(schema):
    for path in ("/v1/rerank", "/v2/rerank"):
        body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"]["$ref"].endswith("/RerankRequest"), path
    rerank = schema["components"]["schemas"]["RerankRequest"]
    assert {"model", "query", "documents"} <= set(rerank["required"])
    documents = rerank["properties"]["documents"]
    assert documents["maxItems"] == 1000
    assert [kind["type"] for kind in documents["items"]["oneOf"]] == ["string", "object"]
    for field in ("top_n", "return_documents", "max_tokens_per_doc", "rank_fields"):
        assert field in rerank["properties"], field
    score = schema["components"]["schemas"]["ScoreRequest"]
    assert {"model", "text_1", "text_2"} <= set(score["required"])
    text = score["properties"]["text_2"]["oneOf"]
    assert text[0] == {"type": "string"} and text[1]["items"] == {"type": "string"}
