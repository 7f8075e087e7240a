"""A Responses request as a chat generation: validate, rebuild the conversation, plan a chat.

The chat body built here goes through the chat endpoint's own validation and planning
(``prepare_chat``), so limits, model grants, the chat template, tools and
structured outputs behave exactly as on /v1/chat/completions; only the names in its errors
are put back into Responses terms.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.conf import settings

from controlplane.access.principals import Principal
from controlplane.common.api_error import ApiError
from engine.text.tokenizer import ChatTokenizer
from inference.errors import in_terms_of, invalid_request
from inference.generation.plan import GenerationPlan, service_tier_of
from inference.generation.planning import chat_prompt_tokens, prepare_chat
from inference.responses.context import ResponseContext
from inference.responses.items import chat_messages
from inference.responses.serializers import ResponsesRequestSerializer
from inference.responses.storage import conversation_before, conversation_items
from inference.schemas.validation import validate_body

# Request fields passed to the chat generation as they are, when sent.
SAME_AS_CHAT = (
    "model",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "ignore_eos",
    "speculative_decoding",
    "cache_salt",
    "priority",
    "stream",
    "user",
    "safety_identifier",
    "service_tier",
    "structured_outputs",
)
# Chat's names for the Responses fields they came from, for error messages.
CHAT_TO_RESPONSES = {
    "messages": "input",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
}


# The ``include`` value that asks for the answer's token logprobs.
OUTPUT_TEXT_LOGPROBS = "message.output_text.logprobs"


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {"name": tool["name"]}
    for name in ("description", "parameters", "strict"):
        if tool.get(name) is not None:
            function[name] = tool[name]
    return {"type": "function", "function": function}


def _response_format(text_format: dict[str, Any]) -> dict[str, Any]:
    if text_format["type"] != "json_schema":
        return {"type": text_format["type"]}
    schema = {"name": text_format["name"], "schema": text_format["schema"]}
    for name in ("description", "strict"):
        if text_format.get(name) is not None:
            schema[name] = text_format[name]
    return {"type": "json_schema", "json_schema": schema}


def chat_body(body: dict[str, Any], context: ResponseContext) -> dict[str, Any]:
    """The /v1/chat/completions body this Responses request amounts to."""
    chat = {name: body[name] for name in SAME_AS_CHAT if body.get(name) is not None}
    chat["messages"] = chat_messages(context.input_items, context.instructions)
    if context.max_output_tokens is not None:
        chat["max_completion_tokens"] = context.max_output_tokens
    if context.tools:
        chat["tools"] = [_chat_tool(tool) for tool in context.tools]
        choice = context.tool_choice
        if isinstance(choice, dict):
            choice = {"type": "function", "function": {"name": choice["name"]}}
        chat["tool_choice"] = choice
        chat["parallel_tool_calls"] = context.parallel_tool_calls
    text_format = context.text.get("format") or {"type": "text"}
    if text_format["type"] != "text":
        chat["response_format"] = _response_format(text_format)
    if context.reasoning.get("effort") is not None:
        chat["reasoning_effort"] = context.reasoning["effort"]
    if context.logprobs:
        chat["logprobs"], chat["top_logprobs"] = True, context.top_logprobs
    return chat


def _context(body: dict[str, Any], principal: Principal, history: list[dict]) -> ResponseContext:
    """The request's context; ``history``: the items it continues (conversation or previous
    response), before its own input."""
    text = body.get("text") or {}
    return ResponseContext(
        tenant_id=principal.tenant_id,
        key_prefix=principal.key_prefix,
        input_items=history + body["input"],
        conversation_id=body.get("conversation"),
        request_items=body["input"],
        instructions=body.get("instructions"),
        previous_response_id=body.get("previous_response_id"),
        store=body["store"],
        background=bool(body.get("background")),
        tools=[dict(tool) for tool in body.get("tools") or []],
        tool_choice=body.get("tool_choice") or "auto",
        parallel_tool_calls=body.get("parallel_tool_calls") is not False,
        text={"format": dict(text.get("format") or {"type": "text"})},
        max_output_tokens=body.get("max_output_tokens"),
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        metadata=dict(body.get("metadata") or {}),
        user=body.get("user"),
        safety_identifier=body.get("safety_identifier"),
        service_tier=service_tier_of(
            "batch" if body.get("service_tier") == "flex" else principal.service_class
        ),
        logprobs=OUTPUT_TEXT_LOGPROBS in (body.get("include") or ()),
        top_logprobs=body.get("top_logprobs") or 0,
        reasoning={
            "effort": (body.get("reasoning") or {}).get("effort"),
            "summary": (body.get("reasoning") or {}).get("summary"),
        },
    )


async def _request(principal: Principal, raw_body: dict[str, Any]):
    """A Responses body validated, with the conversation it continues: (body, context)."""
    body = validate_body(ResponsesRequestSerializer, raw_body)
    if principal.zero_data_retention:
        refuse_for_zero_retention(body)
        body["store"] = False  # treated as false, as OpenAI does for such organizations
    if body.get("conversation"):
        history = await conversation_items(principal, body["conversation"])
    else:
        history = await conversation_before(principal, body.get("previous_response_id"))
    return body, _context(body, principal, history)


def refuse_for_zero_retention(body: dict[str, Any]) -> None:
    """What a tenant with zero data retention cannot ask: whatever would be kept to work."""
    for field, what in (
        ("background", "a background response is kept to be read back"),
        ("conversation", "a conversation is kept on the server"),
        ("previous_response_id", "no response of this tenant is stored to continue"),
    ):
        if body.get(field):
            raise invalid_request(
                f"This tenant keeps no data on the server (zero data retention): {what}.",
                param=field,
            )


async def prepare_response(
    principal: Principal, raw_body: dict[str, Any]
) -> tuple[GenerationPlan, ChatTokenizer]:
    """Validate a Responses body and plan it as a chat generation of kind "response"."""
    body, context = await _request(principal, raw_body)
    try:
        plan, tokenizer = await prepare_chat(
            principal,
            chat_body(body, context),
            default_max_tokens=settings.RESPONSES_DEFAULT_MAX_OUTPUT_TOKENS,
        )
    except ApiError as exc:
        raise in_terms_of(exc, CHAT_TO_RESPONSES) from None
    return dataclasses.replace(plan, kind="response", request_id=context.id, response=context), (
        tokenizer
    )


async def count_input_tokens(principal: Principal, raw_body: dict[str, Any]) -> int:
    """The prompt tokens a Responses body comes to (its conversation, instructions and tools
    included), templated as ``prepare_response`` would; under no request limit."""
    body, context = await _request(principal, raw_body)
    try:
        return len(await chat_prompt_tokens(principal, chat_body(body, context)))
    except ApiError as exc:
        raise in_terms_of(exc, CHAT_TO_RESPONSES) from None
