"""From a raw chat or completion body to a GenerationPlan: validation, model, prompt, sampling.

Shared by the HTTP views and the WebSocket consumer, so both refuse the same bad input with the
same errors before anything reaches the engine.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings

from controlplane.access.admission import check_request_limits
from controlplane.access.principals import Principal, engine_cache_salt
from engine.text.tokenizer import ChatTokenizer
from inference.catalog import ModelEntry, resolve_model, tokenizer_for
from inference.errors import invalid_request
from inference.generation.plan import GenerationPlan, Kind
from inference.prompts import (
    chat_text_length,
    check_token_ids,
    completion_prompts,
    max_tokens_for,
    off_loop,
    refuse_prompts_too_long,
    refuse_text_too_long,
    render_chat_prompt,
)
from inference.sampling import build_sampling
from inference.schemas.chat import ChatCompletionRequestSerializer
from inference.schemas.completions import CompletionRequestSerializer
from inference.schemas.validation import validate_body
from inference.structured_outputs import structured_output_for
from inference.tools import ToolSetup

SERIALIZERS = {"chat": ChatCompletionRequestSerializer, "completion": CompletionRequestSerializer}
# OpenAI's default max_tokens for /v1/completions. Chat defaults to what the context leaves,
# capped by settings.CHAT_DEFAULT_MAX_TOKENS.
DEFAULT_COMPLETION_MAX_TOKENS = 16


async def load_generation_model(
    principal: Principal, name: str
) -> tuple[ModelEntry, ChatTokenizer]:
    entry = await resolve_model(principal, name, with_adapters=True)
    if entry.is_embedding:
        raise invalid_request(f"`{name}` is an embedding model; use /v1/embeddings.", param="model")
    return entry, await tokenizer_for(entry)


def _common(body: dict[str, Any], principal: Principal) -> dict[str, Any]:
    stream_options = body.get("stream_options") or {}
    return {
        "stop": body.get("stop") or [],
        "cache_salt": engine_cache_salt(principal, body.get("cache_salt")),
        "tenant": principal.tenant_slug,
        "include_stop_str_in_output": body.get("include_stop_str_in_output", False),
        "skip_special_tokens": body.get("skip_special_tokens", True),
        "priority": body.get("priority", 0),
        "stream": body.get("stream", False),
        "include_usage": stream_options.get("include_usage", False),
        "continuous_usage": stream_options.get("continuous_usage_stats", False),
    }


def plan_chat(
    principal: Principal, body: dict[str, Any], entry: ModelEntry, tokenizer: ChatTokenizer
) -> GenerationPlan:
    tools = ToolSetup.from_request(
        tools=body.get("tools"),
        tool_choice=body.get("tool_choice"),
        parallel_tool_calls=body.get("parallel_tool_calls"),
        parser=entry.tool_parser,
    )
    structured = structured_output_for(body, tools)
    text, token_ids = render_chat_prompt(tokenizer, body, tools)
    requested = body.get("max_completion_tokens") or body.get("max_tokens")
    max_tokens = max_tokens_for(
        prompt_tokens=len(token_ids),
        requested=requested,
        max_model_len=entry.max_model_len,
        param="messages",
    )
    if requested is None:
        max_tokens = min(settings.CHAT_DEFAULT_MAX_TOKENS, max_tokens)
    logprobs = (body.get("top_logprobs") or 0) if body.get("logprobs") else None
    return GenerationPlan(
        kind="chat",
        model=entry.name,
        engine_model=entry.engine_model,
        adapter=entry.adapter,
        request_id=f"chatcmpl-{uuid.uuid4().hex}",
        prompts=[(text, token_ids)],
        sampling=build_sampling(
            body, max_tokens=max_tokens, logprobs=logprobs, structured=structured
        ),
        logprobs=bool(body.get("logprobs")),
        tools=tools,
        **_common(body, principal),
    )


def plan_completion(
    principal: Principal, body: dict[str, Any], entry: ModelEntry, tokenizer: ChatTokenizer
) -> GenerationPlan:
    prompts = completion_prompts(
        tokenizer, body["prompt"], add_special_tokens=body.get("add_special_tokens", True)
    )
    # Every prompt must fit; the longest decides whether the request does.
    longest = max(len(ids) for _text, ids in prompts)
    requested = body.get("max_tokens")
    max_tokens = max_tokens_for(
        prompt_tokens=longest,
        requested=requested,
        max_model_len=entry.max_model_len,
        param="prompt",
    )
    if requested is None:
        max_tokens = min(DEFAULT_COMPLETION_MAX_TOKENS, max_tokens)
    return GenerationPlan(
        kind="completion",
        model=entry.name,
        engine_model=entry.engine_model,
        adapter=entry.adapter,
        request_id=f"cmpl-{uuid.uuid4().hex}",
        prompts=prompts,
        sampling=build_sampling(
            body,
            max_tokens=max_tokens,
            logprobs=body.get("logprobs"),
            structured=structured_output_for(body),
        ),
        logprobs=body.get("logprobs") is not None,
        echo=body.get("echo", False),
        **_common(body, principal),
    )


def refuse_prompts_that_cannot_fit(kind: Kind, body: dict[str, Any], entry: ModelEntry) -> None:
    """The context-length 400 that needs no tokenizing (see prompts.refuse_text_too_long)."""
    if kind == "chat":
        length = chat_text_length(body["messages"])
        refuse_text_too_long(length, max_model_len=entry.max_model_len, param="messages")
    else:
        refuse_prompts_too_long(body["prompt"], max_model_len=entry.max_model_len, param="prompt")


async def prepare_generation(
    kind: Kind, principal: Principal, raw_body: dict[str, Any]
) -> tuple[GenerationPlan, ChatTokenizer]:
    """Validate ``raw_body`` and plan the generation; raises ApiError for anything wrong.

    Cheap refusals first: the body's fields, the tenant's request limits (429), the model,
    prompts too long to fit; only then the template and the tokenizer, off the event loop.
    """
    if kind == "response":
        # A Responses request is a chat generation underneath (it plans through "chat").
        from inference.responses.planning import prepare_response

        return await prepare_response(principal, raw_body)
    body = validate_body(SERIALIZERS[kind], raw_body)
    await check_request_limits(principal, model=body["model"])
    entry, tokenizer = await load_generation_model(principal, body["model"])
    if kind == "chat" and entry.completions_only:
        raise invalid_request(
            f"`{entry.name}` is a base model without a chat template, so it serves "
            "/v1/completions only; send it a prompt there.",
            param="model",
        )
    if body.get("stop_token_ids"):
        check_token_ids(tokenizer, body["stop_token_ids"], param="stop_token_ids")
    refuse_prompts_that_cannot_fit(kind, body, entry)
    plan_for = plan_chat if kind == "chat" else plan_completion
    return await off_loop(plan_for, principal, body, entry, tokenizer), tokenizer
