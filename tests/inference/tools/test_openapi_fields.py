"""The OpenAPI schema (/api/schema/) types the structured-output and tool fields, and the
fields that take several shapes (stop, prompt, input), as clients may send them."""

from __future__ import annotations

import pytest
import yaml


@pytest.fixture
def components(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    return yaml.safe_load(response.content)["components"]["schemas"]


def _types(prop: dict) -> list:
    return [option.get("type") for option in prop["oneOf"]]


def _resolve(components: dict, prop: dict) -> dict:
    """A property's schema, following a $ref (directly or inside allOf/oneOf)."""
    for option in [prop, *prop.get("allOf", []), *prop.get("oneOf", [])]:
        if "$ref" in option:
            return components[option["$ref"].rsplit("/", 1)[-1]]
    return prop


def test_several_shaped_fields_are_typed_as_all_their_shapes(components):
    chat = components["ChatCompletionRequest"]["properties"]
    assert _types(chat["stop"]) == ["string", "array"]
    for schema, field in (("CompletionRequest", "prompt"), ("EmbeddingRequest", "input")):
        prop = components[schema]["properties"][field]
        assert _types(prop) == ["string", "array", "array", "array"]
        assert prop["oneOf"][2]["items"]["type"] == "integer"  # token ids
        assert prop["oneOf"][3]["items"]["items"]["type"] == "integer"  # lists of them


def test_tool_and_structured_fields_are_described(components):
    chat = components["ChatCompletionRequest"]["properties"]
    for field in (
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "structured_outputs",
        "guided_json",
        "guided_regex",
        "guided_choice",
    ):
        assert field in chat, field
    assert _types(chat["tool_choice"]) == ["string", "object"]
    assert chat["tool_choice"]["oneOf"][0]["enum"] == ["none", "auto", "required"]
    response_format = _resolve(components, chat["response_format"])["properties"]
    kinds = _resolve(components, response_format["type"])["enum"]
    assert set(kinds) == {"text", "json_object", "json_schema"}
    message = components["ChatMessage"]["properties"]
    assert {"tool_calls", "tool_call_id"} <= set(message)
