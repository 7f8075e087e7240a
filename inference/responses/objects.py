"""The Responses API's objects as the openai SDK reads them (openai.types.responses)."""

from __future__ import annotations

from typing import Any

from inference.responses.context import ResponseContext

# finish_reason "length": the Response is "incomplete" because of max_output_tokens.
INCOMPLETE_REASON = {"length": "max_output_tokens"}


def usage(
    input_tokens: int, output_tokens: int, cached_tokens: int, reasoning_tokens: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def response_object(
    context: ResponseContext,
    *,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    incomplete_reason: str | None = None,
    completed_at: int | None = None,
) -> dict[str, Any]:
    """A ``response`` object; settings the request left out echo as what was used."""
    return {
        "id": context.id,
        "object": "response",
        "created_at": context.created_at,
        "status": status,
        "completed_at": completed_at,
        "background": context.background,
        "conversation": {"id": context.conversation_id} if context.conversation_id else None,
        "error": None,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "instructions": context.instructions,
        "max_output_tokens": context.max_output_tokens,
        "max_tool_calls": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": context.parallel_tool_calls,
        "previous_response_id": context.previous_response_id,
        "reasoning": dict(context.reasoning),
        "service_tier": context.service_tier,
        "store": context.store,
        "temperature": 1.0 if context.temperature is None else context.temperature,
        "text": context.text,
        "tool_choice": context.tool_choice,
        "tools": [{**tool, "strict": tool.get("strict", True)} for tool in context.tools],
        "top_logprobs": context.top_logprobs,
        "top_p": 1.0 if context.top_p is None else context.top_p,
        "truncation": "disabled",
        "usage": usage,
        "user": context.user,
        "safety_identifier": context.safety_identifier,
        "metadata": context.metadata,
    }


def output_text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, *, status: str, text: str | None) -> dict[str, Any]:
    """An assistant message; ``text`` None: no content part yet (as streamed when added)."""
    content = [] if text is None else [output_text_part(text)]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def reasoning_text_part(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def reasoning_item(item_id: str, *, status: str, text: str | None) -> dict[str, Any]:
    """The model's thinking, whole as ``content`` (no summary is made of it: ``summary`` is
    empty, and nothing is encrypted); ``text`` None: no part yet (as streamed when added)."""
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [] if text is None else [reasoning_text_part(text)],
        "encrypted_content": None,
        "status": status,
    }


def function_call_item(
    item_id: str, *, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def deleted(response_id: str) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "deleted": True}
