"""A validated Messages body as the /v1/chat/completions body it amounts to.

The chat body then goes through the chat endpoint's own validation and planning, so model
grants, limits, the chat template, tools (``tool_choice`` "any" and a named tool enforced by
the grammar) and structured outputs behave exactly as on /v1/chat/completions.
"""

from __future__ import annotations

import json
from typing import Any

from inference.messages.attribution import without_attribution

# Anthropic's tool_choice types as chat's.
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
# Chat's names for the Messages fields they came from, for error messages.
CHAT_TO_MESSAGES = {
    "max_completion_tokens": "max_tokens",
    "stop": "stop_sequences",
    "response_format": "output_config.format",
}
# A block's text joins the next one's on a new line (blocks are paragraphs, not fragments).
BLOCK_SEPARATOR = "\n"


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    arguments = json.dumps(block["input"], ensure_ascii=False)
    return {
        "id": block["id"],
        "type": "function",
        "function": {"name": block["name"], "arguments": arguments},
    }


def _user_messages(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A user turn: each tool_result a ``tool`` message, runs of text a ``user`` one, in order."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in blocks:
        if block["type"] == "text":
            texts.append(block["text"])
            continue
        if texts:
            out.append({"role": "user", "content": BLOCK_SEPARATOR.join(texts)})
            texts = []
        content = block["content"]
        if block["is_error"]:  # Anthropic's flag has no field in chat: say it in the text
            content = f"Error: {content}"
        out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": content})
    if texts:
        out.append({"role": "user", "content": BLOCK_SEPARATOR.join(texts)})
    return out


def _assistant_message(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """An assistant turn: its text and its tool calls (earlier thinking is not shown again)."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": BLOCK_SEPARATOR.join(b["text"] for b in blocks if b["type"] == "text"),
    }
    calls = [_tool_call(b) for b in blocks if b["type"] == "tool_use"]
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(body: dict[str, Any], *, drop_attribution: bool) -> list[dict[str, Any]]:
    system = body.get("system") or []
    if drop_attribution:
        system = without_attribution(system)
    messages = []
    if system:
        messages.append({"role": "system", "content": BLOCK_SEPARATOR.join(system)})
    for message in body["messages"]:
        if message["role"] == "user":
            messages.extend(_user_messages(message["content"]))
        else:
            messages.append(_assistant_message(message["content"]))
    return messages


def _tools(body: dict[str, Any]) -> dict[str, Any]:
    tools = body.get("tools")
    if not tools:
        return {}
    out: dict[str, Any] = {
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool.get("description"),
                    "parameters": tool["input_schema"],
                },
            }
            for tool in tools
        ]
    }
    choice = body.get("tool_choice") or {"type": "auto"}
    if choice["type"] == "tool":
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        out["tool_choice"] = TOOL_CHOICES[choice["type"]]
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out


def _template_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    """Thinking and effort as the switches reasoning models' chat templates read (Qwen3's
    ``enable_thinking``, gpt-oss's ``reasoning_effort``); other templates ignore them."""
    kwargs: dict[str, Any] = {}
    thinking = body.get("thinking")
    if thinking is not None:
        kwargs["enable_thinking"] = thinking["type"] != "disabled"
    effort = (body.get("output_config") or {}).get("effort")
    if effort:
        kwargs["reasoning_effort"] = effort
    return kwargs


def chat_body(body: dict[str, Any], *, drop_attribution: bool) -> dict[str, Any]:
    """The chat body of a validated Messages (or count_tokens) body."""
    chat: dict[str, Any] = {
        "model": body["model"],
        "messages": chat_messages(body, drop_attribution=drop_attribution),
        **_tools(body),
    }
    for name in ("temperature", "top_p", "top_k", "stream"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("max_tokens") is not None:
        chat["max_completion_tokens"] = body["max_tokens"]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    user = (body.get("metadata") or {}).get("user_id")
    if user:
        chat["user"] = user
    output_format = (body.get("output_config") or {}).get("format")
    if output_format:
        chat["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": output_format["schema"]},
        }
    kwargs = _template_kwargs(body)
    if kwargs:
        chat["chat_template_kwargs"] = kwargs
    return chat
