"""Input items: validated and given ids (as ``input_items`` lists them), turned into chat
messages for the chat template, and a response's output turned back into input items (what
``previous_response_id`` continues)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from inference.responses.context import new_item_id
from inference.schemas.fields import INVALID_TEXT, is_valid_text

ROLES = ("user", "assistant", "system", "developer")
MAX_ITEMS = 2048  # as chat's messages
# The content part types a message may hold; images, files and audio are not served here.
TEXT_PARTS = ("input_text", "output_text")


def _fail(message: str) -> None:
    raise serializers.ValidationError(message)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        _fail(f"{what} must be a string.")
    if not is_valid_text(value):
        _fail(f"{what} {INVALID_TEXT}")
    return value


def _part(kind: str, text: str) -> dict[str, Any]:
    return {"type": kind, "text": text, **({"annotations": []} if kind == "output_text" else {})}


def _message(raw: dict[str, Any]) -> dict[str, Any]:
    role = raw.get("role")
    if role not in ROLES:
        _fail(f"a message's role must be one of {', '.join(ROLES)}.")
    part_type = "output_text" if role == "assistant" else "input_text"
    content = raw.get("content")
    if isinstance(content, str):
        parts = [_part(part_type, _text(content, "content"))]
    elif isinstance(content, list):
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in TEXT_PARTS:
                _fail(f"only text content parts are supported ({' or '.join(TEXT_PARTS)}).")
            parts.append(_part(kind, _text(part.get("text"), "a part's text")))
    else:
        _fail("a message's content must be a string or a list of content parts.")
    return {
        "id": raw.get("id") or new_item_id("msg"),
        "type": "message",
        "role": role,
        "status": "completed",
        "content": parts,
    }


def _function_call(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": raw.get("id") or new_item_id("fc"),
        "type": "function_call",
        "call_id": _text(raw.get("call_id"), "call_id"),
        "name": _text(raw.get("name"), "name"),
        "arguments": _text(raw.get("arguments"), "arguments"),
        "status": "completed",
    }


def _function_call_output(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": raw.get("id") or new_item_id("fco"),
        "type": "function_call_output",
        "call_id": _text(raw.get("call_id"), "call_id"),
        "output": _text(raw.get("output"), "output"),
        "status": "completed",
    }


def _reasoning_parts(raw: dict[str, Any], field: str, kind: str) -> list[dict[str, Any]]:
    parts = raw.get(field) or []
    if not isinstance(parts, list):
        _fail(f"a reasoning item's {field} must be a list of {kind} parts.")
    out = []
    for part in parts:
        if not isinstance(part, dict) or part.get("type") != kind:
            _fail(f"a reasoning item's {field} holds {kind} parts only.")
        out.append({"type": kind, "text": _text(part.get("text"), f"a {kind}'s text")})
    return out


def _reasoning(raw: dict[str, Any]) -> dict[str, Any]:
    """Thinking given back (``encrypted_content`` is not used: this server encrypts none)."""
    return {
        "id": raw.get("id") or new_item_id("rs"),
        "type": "reasoning",
        "summary": _reasoning_parts(raw, "summary", "summary_text"),
        "content": _reasoning_parts(raw, "content", "reasoning_text"),
        "encrypted_content": None,
        "status": "completed",
    }


def _item(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        _fail("each input item must be an object.")
    kind = raw.get("type", "message")  # EasyInputMessage: {"role", "content"} without a type
    if kind == "message":
        return _message(raw)
    if kind == "function_call":
        return _function_call(raw)
    if kind == "function_call_output":
        return _function_call_output(raw)
    if kind == "reasoning":
        return _reasoning(raw)
    _fail(
        f"input items of type {kind!r} are not supported; use message, function_call, "
        "function_call_output or reasoning."
    )
    raise AssertionError  # unreachable: _fail raised


def input_items(data: Any) -> list[dict[str, Any]]:
    """``input`` (a string or a list of items) as items with ids; ValidationError if bad."""
    if isinstance(data, str):
        return [_message({"role": "user", "content": data})]
    if not isinstance(data, list) or not data:
        _fail("must be a string or a non-empty list of input items.")
    if len(data) > MAX_ITEMS:
        _fail(f"must hold at most {MAX_ITEMS} items.")
    items = []
    for index, raw in enumerate(data):
        try:
            items.append(_item(raw))
        except serializers.ValidationError as exc:
            raise serializers.ValidationError({index: exc.detail}) from exc
    return items


def output_as_input(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's output items as the input items of the conversation that continues it."""
    items = []
    for item in output:
        if item.get("type") == "message":
            content = [_part("output_text", part.get("text", "")) for part in item["content"]]
            items.append({**item, "content": content, "status": "completed"})
        elif item.get("type") in ("function_call", "reasoning"):
            items.append({**item, "status": "completed"})
    return items


def _joined(parts: list[dict[str, Any]]) -> str:
    return "".join(part["text"] for part in parts)


def chat_messages(items: list[dict[str, Any]], instructions: str | None) -> list[dict[str, Any]]:
    """Chat messages for ``items``: ``instructions`` first as the system message; consecutive
    function calls become one assistant message's ``tool_calls``, outputs ``tool`` messages;
    a reasoning item is the ``reasoning_content`` of the assistant turn that follows it."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    thinking = ""
    for item in items:
        if item["type"] == "reasoning":
            thinking += _joined(item["content"]) or _joined(item["summary"])
            continue
        if item["type"] == "message":
            messages.append({"role": item["role"], "content": _joined(item["content"])})
        elif item["type"] == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                # One turn: the text the model said before calling, or the calls before it.
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        else:  # function_call_output
            messages.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}
            )
        if thinking and messages[-1]["role"] == "assistant":
            messages[-1]["reasoning_content"], thinking = thinking, ""
    return messages
