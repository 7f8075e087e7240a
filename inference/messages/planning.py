"""A Messages request as a chat generation: validate, convert, plan a chat of kind "messages".

The chat body built from it (conversion.py) goes through the chat endpoint's own validation
and planning (``prepare_chat``), so keys, limits, usage, tenant salts, the chat template and
tools behave exactly as on /v1/chat/completions; only the names in its errors are put back
into Messages terms. ``max_tokens`` beyond what the context leaves is lowered to it
(clients such as Claude Code ask for 32000 whatever the model).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from controlplane.access.principals import Principal
from controlplane.common.api_error import ApiError
from engine.text.tokenizer import ChatTokenizer
from inference.catalog import resolve_model
from inference.errors import in_terms_of
from inference.generation.plan import GenerationPlan
from inference.generation.planning import chat_prompt_tokens, prepare_chat
from inference.messages.conversion import CHAT_TO_MESSAGES, chat_body
from inference.messages.serializers import CountTokensRequestSerializer, MessagesRequestSerializer
from inference.schemas.validation import validate_body


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


async def _chat_body(principal: Principal, raw_body: dict[str, Any], serializer) -> dict[str, Any]:
    body = validate_body(serializer, raw_body)
    # The served model's choice (404 here for a model the caller may not use, as in chat).
    entry = await resolve_model(principal, body["model"], with_adapters=True)
    return chat_body(body, drop_attribution=entry.drop_attribution_header)


async def prepare_messages(
    principal: Principal, raw_body: dict[str, Any]
) -> tuple[GenerationPlan, ChatTokenizer]:
    """Validate a /v1/messages body and plan it as a chat generation of kind "messages"."""
    chat = await _chat_body(principal, raw_body, MessagesRequestSerializer)
    try:
        plan, tokenizer = await prepare_chat(principal, chat, fit_max_tokens=True)
    except ApiError as exc:
        raise in_terms_of(exc, CHAT_TO_MESSAGES) from None
    return dataclasses.replace(plan, kind="messages", request_id=new_message_id()), tokenizer


async def count_message_tokens(principal: Principal, raw_body: dict[str, Any]) -> int:
    """The prompt tokens a /v1/messages body with these messages, system and tools sends the
    engine (what its response's usage reports as input)."""
    chat = await _chat_body(principal, raw_body, CountTokensRequestSerializer)
    try:
        return len(await chat_prompt_tokens(principal, chat))
    except ApiError as exc:
        raise in_terms_of(exc, CHAT_TO_MESSAGES) from None
