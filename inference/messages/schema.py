"""OpenAPI descriptions of what the Messages endpoints answer (the requests are serializers)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse

from controlplane.common.anthropic_errors import ERROR_TYPES

_TEXT = {"type": "string"}
_TOKENS = {"type": "integer", "minimum": 0}
_TEXT_BLOCK = {
    "type": "object",
    "properties": {"type": {"type": "string", "enum": ["text"]}, "text": _TEXT},
    "required": ["type", "text"],
}
_THINKING_BLOCK = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["thinking"]},
        "thinking": _TEXT,
        "signature": _TEXT,
    },
    "required": ["type", "thinking", "signature"],
}
_TOOL_USE_BLOCK = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["tool_use"]},
        "id": {"type": "string", "description": "toolu_..."},
        "name": _TEXT,
        "input": {"type": "object", "additionalProperties": True},
    },
    "required": ["type", "id", "name", "input"],
}
MESSAGE = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "msg_..."},
        "type": {"type": "string", "enum": ["message"]},
        "role": {"type": "string", "enum": ["assistant"]},
        "model": _TEXT,
        "content": {
            "type": "array",
            "items": {"oneOf": [_THINKING_BLOCK, _TEXT_BLOCK, _TOOL_USE_BLOCK]},
        },
        "stop_reason": {
            "type": "string",
            "enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use"],
        },
        "stop_sequence": {"type": "string", "nullable": True},
        "usage": {
            "type": "object",
            "properties": {
                "input_tokens": {
                    **_TOKENS,
                    "description": "prompt tokens the prefix cache did not hold",
                },
                "cache_read_input_tokens": {
                    **_TOKENS,
                    "description": "prompt tokens read from the prefix cache",
                },
                "cache_creation_input_tokens": {**_TOKENS, "description": "always 0"},
                "output_tokens": _TOKENS,
            },
            "required": ["input_tokens", "output_tokens"],
        },
    },
    "required": ["id", "type", "role", "model", "content", "stop_reason", "usage"],
}
COUNT = {
    "type": "object",
    "properties": {"input_tokens": _TOKENS},
    "required": ["input_tokens"],
}
ERROR = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["error"]},
        "error": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": sorted(set(ERROR_TYPES.values()))},
                "message": _TEXT,
            },
            "required": ["type", "message"],
        },
    },
    "required": ["type", "error"],
}

CREATED = OpenApiResponse(
    response=MESSAGE,
    description="The message; with stream: text/event-stream of Anthropic's events "
    "(message_start, ping, content_block_start/delta/stop..., message_delta, message_stop).",
)
COUNTED = OpenApiResponse(response=COUNT, description="The prompt's tokens.")
ERRORS = {
    status: OpenApiResponse(response=ERROR, description=f"{kind}, in Anthropic's error shape")
    for status, kind in (
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (404, "not_found_error"),
        (429, "rate_limit_error"),
    )
}
