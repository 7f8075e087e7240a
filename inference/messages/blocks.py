"""Content blocks of a Messages request: ``system`` and each message's ``content``, checked
for shape and normalised (conversion.py turns them into chat messages). Image, document and
server-tool blocks are refused with why."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inference.schemas.fields import INVALID_TEXT, MAX_NAME_LENGTH, is_valid_text

# Blocks of earlier turns the model does not read again (as Anthropic drops earlier turns'
# thinking): accepted in assistant turns and left out of the prompt.
DROPPED_BLOCKS = ("thinking", "redacted_thinking")
# Why a block type is refused, for the ones clients are likely to send.
REFUSED_BLOCKS = {
    "image": "image blocks are not supported: the served models read text only.",
    "document": "document blocks are not supported: send the document's text in a text block.",
    "search_result": "search_result blocks are not supported: send the text in a text block.",
}
BLOCKS_OF_ROLE = {
    "user": ("text", "tool_result"),
    "assistant": ("text", "tool_use", *DROPPED_BLOCKS),
}

_TEXT_BLOCK = {
    "type": "object",
    "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}},
    "required": ["type", "text"],
}
_TOOL_USE_BLOCK = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["tool_use"]},
        "id": {"type": "string"},
        "name": {"type": "string"},
        "input": {"type": "object", "additionalProperties": True},
    },
    "required": ["type", "id", "name", "input"],
}
_TOOL_RESULT_BLOCK = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["tool_result"]},
        "tool_use_id": {"type": "string"},
        "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": _TEXT_BLOCK}]},
        "is_error": {"type": "boolean"},
    },
    "required": ["type", "tool_use_id"],
}
_THINKING_BLOCK = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": list(DROPPED_BLOCKS)},
        "thinking": {"type": "string"},
        "signature": {"type": "string"},
    },
    "required": ["type"],
}


def _text(value, fail) -> str:
    if not isinstance(value, str):
        fail("must be a string.")
    if not is_valid_text(value):
        fail(INVALID_TEXT)
    return value


def _text_blocks(value, where: str, fail) -> str:
    """A string, or a list of text blocks, as one string."""
    if isinstance(value, str):
        return _text(value, fail)
    if not isinstance(value, list):
        fail(f"{where} must be a string or a list of text blocks.")
    texts = []
    for block in value:
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else None
            refused = REFUSED_BLOCKS.get(kind) if isinstance(kind, str) else None
            fail(refused or f"{where} may hold only text blocks.")
        texts.append(_text(block.get("text"), fail))
    return "".join(texts)


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "array", "items": _TEXT_BLOCK}]})
class SystemField(serializers.Field):
    """``system``: a string or a list of text blocks, kept as a list of texts (one a block)."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            return [_text(data, self._fail)]
        if not isinstance(data, list):
            self._fail("must be a string or a list of text blocks.")
        return [_text_blocks([block], "system", self._fail) for block in data]

    def _fail(self, message: str):
        raise serializers.ValidationError(message)

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {
                "type": "array",
                "items": {
                    "oneOf": [_TEXT_BLOCK, _TOOL_USE_BLOCK, _TOOL_RESULT_BLOCK, _THINKING_BLOCK]
                },
            },
        ]
    }
)
class ContentBlocksField(serializers.Field):
    """A message's ``content``: a string, or blocks (normalised to a list of blocks).

    Blocks are kept as dicts with only what is used: text ``{"type", "text"}``, tool_use
    ``{"type", "id", "name", "input"}``, tool_result ``{"type", "tool_use_id", "content",
    "is_error"}`` (content as one string); thinking blocks as ``{"type"}``.
    """

    def to_internal_value(self, data):
        if isinstance(data, str):
            return [{"type": "text", "text": _text(data, self._fail)}]
        if not isinstance(data, list):
            self._fail("must be a string or a list of content blocks.")
        return [self._block(index, block) for index, block in enumerate(data)]

    def _fail(self, message: str):
        raise serializers.ValidationError(message)

    def _block(self, index: int, block) -> dict:
        def fail(message: str):
            raise serializers.ValidationError({index: message})

        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            fail("a content block must be an object with a type.")
        kind = block["type"]
        if kind == "text":
            return {"type": "text", "text": _text(block.get("text"), fail)}
        if kind == "tool_use":
            if not isinstance(block.get("input"), dict):
                fail("a tool_use block's input must be an object.")
            return {
                "type": "tool_use",
                "id": _name(block.get("id"), "id", fail),
                "name": _name(block.get("name"), "name", fail),
                "input": block["input"],
            }
        if kind == "tool_result":
            content = block.get("content", "")
            return {
                "type": "tool_result",
                "tool_use_id": _name(block.get("tool_use_id"), "tool_use_id", fail),
                "content": _text_blocks(content, "a tool_result's content", fail),
                "is_error": block.get("is_error") is True,
            }
        if kind in DROPPED_BLOCKS:
            return {"type": kind}
        fail(REFUSED_BLOCKS.get(kind) or f"content blocks of type {kind!r} are not supported.")

    def to_representation(self, value):
        return value


def _name(value, field: str, fail) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_LENGTH:
        fail(f"{field} must be a string of 1 to {MAX_NAME_LENGTH} characters.")
    return value
