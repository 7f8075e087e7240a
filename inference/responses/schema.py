"""OpenAPI descriptions of what the Responses endpoints answer (the requests are serializers)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse

_TEXT = {"type": "string"}
_OUTPUT_TEXT = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["output_text"]},
        "text": _TEXT,
        "annotations": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["type", "text", "annotations"],
}
_ITEM_STATUS = {"type": "string", "enum": ["in_progress", "completed", "incomplete"]}
_MESSAGE = {
    "type": "object",
    "properties": {
        "id": _TEXT,
        "type": {"type": "string", "enum": ["message"]},
        "role": {"type": "string", "enum": ["assistant"]},
        "status": _ITEM_STATUS,
        "content": {"type": "array", "items": _OUTPUT_TEXT},
    },
    "required": ["id", "type", "role", "status", "content"],
}
_FUNCTION_CALL = {
    "type": "object",
    "properties": {
        "id": _TEXT,
        "type": {"type": "string", "enum": ["function_call"]},
        "call_id": _TEXT,
        "name": _TEXT,
        "arguments": {"type": "string", "description": "JSON text"},
        "status": _ITEM_STATUS,
    },
    "required": ["type", "call_id", "name", "arguments"],
}
_REASONING = {
    "type": "object",
    "description": "A thinking model's thinking, whole in content (summary stays empty).",
    "properties": {
        "id": _TEXT,
        "type": {"type": "string", "enum": ["reasoning"]},
        "summary": {"type": "array", "items": {"type": "object"}},
        "content": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["reasoning_text"]},
                    "text": _TEXT,
                },
                "required": ["type", "text"],
            },
        },
        "status": _ITEM_STATUS,
    },
    "required": ["id", "type", "summary"],
}
_TOKENS = {"type": "integer", "minimum": 0}
_USAGE = {
    "type": "object",
    "properties": {
        "input_tokens": _TOKENS,
        "input_tokens_details": {
            "type": "object",
            "properties": {"cached_tokens": _TOKENS},
            "required": ["cached_tokens"],
        },
        "output_tokens": _TOKENS,
        "output_tokens_details": {
            "type": "object",
            "properties": {"reasoning_tokens": _TOKENS},
            "required": ["reasoning_tokens"],
        },
        "total_tokens": _TOKENS,
    },
    "required": [
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    ],
}
RESPONSE = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "resp_..."},
        "object": {"type": "string", "enum": ["response"]},
        "created_at": {"type": "integer"},
        "status": {"type": "string", "enum": ["completed", "incomplete", "in_progress"]},
        "incomplete_details": {
            "type": "object",
            "nullable": True,
            "properties": {"reason": {"type": "string", "enum": ["max_output_tokens"]}},
        },
        "model": _TEXT,
        "instructions": {"type": "string", "nullable": True},
        "previous_response_id": {"type": "string", "nullable": True},
        "output": {"type": "array", "items": {"oneOf": [_REASONING, _MESSAGE, _FUNCTION_CALL]}},
        "usage": {**_USAGE, "nullable": True},
        "store": {"type": "boolean"},
    },
    "required": ["id", "object", "created_at", "status", "model", "output"],
}
DELETED = {
    "type": "object",
    "properties": {
        "id": _TEXT,
        "object": {"type": "string", "enum": ["response"]},
        "deleted": {"type": "boolean"},
    },
    "required": ["id", "object", "deleted"],
}
ITEM_LIST = {
    "type": "object",
    "properties": {
        "object": {"type": "string", "enum": ["list"]},
        "data": {"type": "array", "items": {"type": "object"}},
        "first_id": {"type": "string", "nullable": True},
        "last_id": {"type": "string", "nullable": True},
        "has_more": {"type": "boolean"},
    },
    "required": ["object", "data", "has_more"],
}

CREATED = OpenApiResponse(
    response=RESPONSE,
    description="The response; with stream: text/event-stream of typed events "
    "(response.created ... response.completed).",
)
FOUND = OpenApiResponse(response=RESPONSE, description="A stored response of your tenant.")
GONE = OpenApiResponse(response=DELETED, description="The stored response was deleted.")
ITEMS = OpenApiResponse(response=ITEM_LIST, description="Input items, newest first by default.")
