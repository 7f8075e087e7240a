"""The OpenAPI schema types every request field as the API accepts it, and is valid OpenAPI 3.

Client generators read /api/schema/: a field typed narrower than what the API takes (``stop``
as a plain string, say) makes generated clients refuse valid requests.
"""

from __future__ import annotations

import pytest
import yaml
from openapi_spec_validator import validate

STRINGS = {"type": "array", "items": {"type": "string"}}
TOKEN_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
PROMPT_KINDS = [{"type": "string"}, STRINGS, TOKEN_IDS, {"type": "array", "items": TOKEN_IDS}]


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    from django.test import Client

    with django_db_blocker.unblock():
        response = Client().get("/api/schema/")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


def _resolve(schema: dict, node: dict) -> dict:
    """``node`` with ``$ref`` (also behind a one-item ``allOf``) followed."""
    if "allOf" in node and len(node["allOf"]) == 1:
        node = node["allOf"][0]
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return schema["components"]["schemas"][name]
    return node


def _body(schema: dict, path: str) -> dict:
    content = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    return _resolve(schema, content["schema"])


def _alternatives(node: dict) -> list[dict]:
    return [{k: v for k, v in alt.items() if k != "description"} for alt in node["oneOf"]]


def test_the_schema_is_valid_openapi_3(schema):
    assert schema["openapi"].startswith("3.")
    validate(schema)  # raises on any violation of the OpenAPI 3 specification


def test_stop_is_a_string_or_a_list_of_strings(schema):
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
        stop = _body(schema, path)["properties"]["stop"]
        assert _alternatives(stop) == [{"type": "string"}, STRINGS], path
        assert stop.get("nullable") is True


def test_prompt_and_embedding_input_take_text_or_token_ids(schema):
    prompt = _body(schema, "/v1/completions")["properties"]["prompt"]
    assert _alternatives(prompt) == PROMPT_KINDS
    embedding_input = _body(schema, "/v1/embeddings")["properties"]["input"]
    assert _alternatives(embedding_input) == PROMPT_KINDS


def test_message_content_is_a_string_or_a_list_of_parts(schema):
    messages = _body(schema, "/v1/chat/completions")["properties"]["messages"]
    assert messages["type"] == "array"
    message = _resolve(schema, messages["items"])
    content = _alternatives(message["properties"]["content"])
    assert content[0] == {"type": "string"}
    assert content[1]["type"] == "array"
    part = content[1]["items"]
    assert part["required"] == ["type", "text"] and part["properties"]["text"] == {"type": "string"}


def test_responses_endpoints_and_request_are_described(schema):
    paths = schema["paths"]
    assert set(paths["/v1/responses"]) >= {"post"}
    assert set(paths["/v1/responses/{response_id}"]) >= {"get", "delete"}
    assert "get" in paths["/v1/responses/{response_id}/input_items"]
    body = _body(schema, "/v1/responses")
    assert {"model", "input"} <= set(body["required"])
    props = body["properties"]
    text_input, item_list = _alternatives(props["input"])
    assert text_input == {"type": "string"}
    item_types = [alt["properties"]["type"]["enum"] for alt in item_list["items"]["oneOf"]]
    assert item_types == [["message"], ["function_call"], ["function_call_output"], ["reasoning"]]
    tool = _resolve(schema, props["tools"]["items"])
    assert {"type", "name"} <= set(tool["required"])
    assert "parameters" in tool["properties"]
    text_format = _resolve(schema, _resolve(schema, props["text"])["properties"]["format"])
    kinds = _resolve(schema, text_format["properties"]["type"])["enum"]
    assert kinds == ["text", "json_object", "json_schema"]
    for name in ("instructions", "previous_response_id", "store", "stream", "max_output_tokens"):
        assert name in props, name
    assert props["temperature"]["maximum"] == 2.0 and props["top_p"]["maximum"] == 1.0


def test_responses_answers_are_described(schema):
    def answer(path: str, method: str) -> dict:
        content = schema["paths"][path][method]["responses"]["200"]["content"]
        return content["application/json"]["schema"]

    created = answer("/v1/responses", "post")
    assert created == answer("/v1/responses/{response_id}", "get")
    assert {"id", "object", "status", "output"} <= set(created["required"])
    output_types = [
        alt["properties"]["type"]["enum"]
        for alt in created["properties"]["output"]["items"]["oneOf"]
    ]
    assert output_types == [["reasoning"], ["message"], ["function_call"]]
    usage = created["properties"]["usage"]
    assert {"input_tokens", "output_tokens", "total_tokens", "input_tokens_details"} <= set(
        usage["required"]
    )
    deleted = answer("/v1/responses/{response_id}", "delete")
    assert deleted["properties"]["deleted"] == {"type": "boolean"}
    listed = answer("/v1/responses/{response_id}/input_items", "get")
    assert listed["properties"]["object"]["enum"] == ["list"]
