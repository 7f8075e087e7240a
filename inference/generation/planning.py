"""From a raw chat or completion body to a GenerationPlan: validation, model, prompt, sampling.

Each caller picks its planner: ``prepare_chat`` and ``prepare_completion`` here, the
Responses API's ``prepare_response`` (inference/responses/planning.py), which plans a chat.
The HTTP views, the WebSocket consumer and batch lines share them, so all refuse the same bad
input with the same errors before anything reaches the engine.

Rendering and tokenizing cost time in proportion to the prompt, so they run off the event
loop (``off_loop``: a few dedicated threads; long texts are tokenized without the GIL), and a
prompt that cannot fit the context however it tokenizes is refused before any of that
(``refuse_prompts_too_long``).
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
from django.conf import settings

from controlplane.access.principals import Principal, engine_cache_salt
from controlplane.catalog.cache import CatalogSnapshot, acatalog_snapshot
from engine.text.tokenizer import ChatTokenizer, TokenizerError
from inference.catalog import ModelEntry, resolve_model, tokenizer_for
from inference.chat_store.context import store_context
from inference.end_user import end_user_of, end_user_param
from inference.errors import invalid_request
from inference.generation.off_loop import off_loop
from inference.generation.plan import GenerationPlan
from inference.generation.prompt_limits import (
    chat_text_length,
    check_token_ids,
    max_tokens_for,
    refuse_prompts_too_long,
    refuse_text_too_long,
)
from inference.generation.shared_prefixes import mark_shared_prefixes
from inference.limits import check_request_limits
from inference.reasoning import reasoning_setup
from inference.reasoning.template import thinking_kwargs
from inference.sampling import build_sampling
from inference.schemas.chat import ChatCompletionRequestSerializer
from inference.schemas.completions import CompletionRequestSerializer
from inference.schemas.validation import validate_body
from inference.structured_outputs import structured_output_for
from inference.tools import ToolSetup, template_input
from inference.transport import OutputOptions

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
        "output": OutputOptions(
            stop=tuple(body.get("stop") or ()),
            include_stop_str_in_output=body.get("include_stop_str_in_output", False),
            skip_special_tokens=body.get("skip_special_tokens", True),
        ),
        "cache_salt": engine_cache_salt(principal, body.get("cache_salt")),
        "tenant": principal.tenant_slug,
        "engine_tenant": principal.engine_tenant,
        "share_weight": float(principal.share_weight),
        "service_class": "batch" if body.get("service_tier") == "flex" else principal.service_class,
        "priority": body.get("priority", 0),
        "end_user": end_user_of(body),
        "end_user_param": end_user_param(body),
        "stream": body.get("stream", False),
        "include_usage": stream_options.get("include_usage", False),
        "continuous_usage": stream_options.get("continuous_usage_stats", False),
        "prompt_logprobs_field": body.get("prompt_logprobs"),
    }


def chat_prompt(
    body: dict[str, Any], entry: ModelEntry, tokenizer: ChatTokenizer
) -> tuple[ToolSetup | None, str, list[int]]:
    """A validated chat body's tools and its prompt (text, token ids), as the engine sees it."""
    tools = ToolSetup.from_request(
        tools=body.get("tools"),
        tool_choice=body.get("tool_choice"),
        parallel_tool_calls=body.get("parallel_tool_calls"),
        parser=entry.tool_parser,
        legacy=body.get("legacy_functions", False),
    )
    return tools, *render_chat_prompt(tokenizer, body, tools)


def plan_chat(
    principal: Principal,
    body: dict[str, Any],
    entry: ModelEntry,
    tokenizer: ChatTokenizer,
    *,
    fit_max_tokens: bool = False,
    default_max_tokens: int | None = None,
) -> GenerationPlan:
    tools, text, token_ids = chat_prompt(body, entry, tokenizer)
    structured = structured_output_for(body, tools)
    requested = body.get("max_completion_tokens") or body.get("max_tokens")
    max_tokens = max_tokens_for(
        prompt_tokens=len(token_ids),
        requested=requested,
        max_model_len=entry.max_model_len,
        param="messages",
        fit=fit_max_tokens,
    )
    if requested is None:
        cap = settings.CHAT_DEFAULT_MAX_TOKENS if default_max_tokens is None else default_max_tokens
        max_tokens = min(cap, max_tokens) if cap > 0 else max_tokens
    logprobs = (body.get("top_logprobs") or 0) if body.get("logprobs") else None
    common = _common(body, principal)
    if entry.reasoning_parser == "gpt_oss":  # harmony's channel markers are special tokens
        common["output"] = dataclasses.replace(common["output"], skip_special_tokens=False)
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
        reasoning=reasoning_setup(entry.reasoning_parser, text),
        **common,
    )


def plan_completion(
    principal: Principal, body: dict[str, Any], entry: ModelEntry, tokenizer: ChatTokenizer
) -> GenerationPlan:
    prompts = completion_prompts(
        tokenizer,
        body["prompt"],
        add_special_tokens=body.get("add_special_tokens", True),
        with_text=body.get("echo", False),
    )
    # Every prompt must fit; the longest decides whether the request does.
    longest = max(len(ids) for _text, ids in prompts)
    requested = body.get("max_tokens")
    # max_tokens 0 (with echo: the schema checks): score the prompt. An engine makes at least
    # one token; it is left out of the answer.
    echo_only = requested == 0
    max_tokens = max_tokens_for(
        prompt_tokens=longest,
        requested=1 if echo_only else requested,
        max_model_len=entry.max_model_len,
        param="prompt",
    )
    if requested is None:
        max_tokens = min(DEFAULT_COMPLETION_MAX_TOKENS, max_tokens)
    logprobs = body.get("logprobs")
    sampling = build_sampling(
        body, max_tokens=max_tokens, logprobs=logprobs, structured=structured_output_for(body)
    )
    prompt_logprobs = body.get("echo", False) and logprobs is not None
    if prompt_logprobs:  # as many alternatives per prompt token as per generated one (or more
        wanted = max(logprobs, sampling.prompt_logprobs or 0)  # for vLLM's prompt_logprobs)
        sampling = msgspec.structs.replace(sampling, prompt_logprobs=wanted)
    return GenerationPlan(
        kind="completion",
        model=entry.name,
        engine_model=entry.engine_model,
        adapter=entry.adapter,
        request_id=f"cmpl-{uuid.uuid4().hex}",
        prompts=prompts,
        sampling=sampling,
        logprobs=logprobs is not None,
        echo=body.get("echo", False),
        prompt_logprobs=prompt_logprobs,
        echo_only=echo_only,
        **_common(body, principal),
    )


async def _validated(
    kind: str, principal: Principal, raw_body: dict[str, Any], *, count_request: bool = True
) -> tuple[dict[str, Any], ModelEntry, ChatTokenizer]:
    """The cheap refusals first: the body's fields, the tenant's request limits (429; not
    for a mere count), the model; the template and tokenizer run later, off the loop."""
    body = validate_body(SERIALIZERS[kind], raw_body)
    if count_request:
        await check_request_limits(
            principal,
            model=body["model"],
            end_user=end_user_of(body),
            end_user_param=end_user_param(body),
        )
    entry, tokenizer = await load_generation_model(principal, body["model"])
    return body, entry, tokenizer


def _check_token_id_fields(body: dict[str, Any], tokenizer: ChatTokenizer) -> None:
    """The fields that name token ids, against the model's vocabulary."""
    for param in ("stop_token_ids", "allowed_token_ids", "logit_bias"):
        if body.get(param):
            check_token_ids(tokenizer, list(body[param]), param=param)


async def _chat_request(
    principal: Principal, raw_body: dict[str, Any], *, count_request: bool = True
) -> tuple[dict[str, Any], ModelEntry, ChatTokenizer]:
    """A /v1/chat/completions body checked up to its template: 400, 404 or 429 if wrong."""
    body, entry, tokenizer = await _validated(
        "chat", principal, raw_body, count_request=count_request
    )
    if entry.completions_only:
        raise invalid_request(
            f"`{entry.name}` is a base model without a chat template, so it serves "
            "/v1/completions only; send it a prompt there.",
            param="model",
        )
    _check_token_id_fields(body, tokenizer)
    length = chat_text_length(body["messages"])
    refuse_text_too_long(length, max_model_len=entry.max_model_len, param="messages")
    return body, entry, tokenizer


async def prepare_chat(
    principal: Principal,
    raw_body: dict[str, Any],
    *,
    fit_max_tokens: bool = False,
    default_max_tokens: int | None = None,
) -> tuple[GenerationPlan, ChatTokenizer]:
    """Validate a /v1/chat/completions body and plan it; raises ApiError for anything wrong.
    ``fit_max_tokens``: a ``max_completion_tokens`` beyond what the context leaves is lowered
    to it instead of refused (the Messages API's choice, see inference/messages/).
    ``default_max_tokens``: the cap when the body sets none (None: CHAT_DEFAULT_MAX_TOKENS;
    0: what the context leaves)."""
    body, entry, tokenizer = await _chat_request(principal, raw_body)
    catalog = await acatalog_snapshot()
    planner = functools.partial(
        plan_chat, fit_max_tokens=fit_max_tokens, default_max_tokens=default_max_tokens
    )
    plan = await off_loop(_planned, planner, principal, body, entry, tokenizer, catalog)
    plan.chat_store = store_context(principal, body, raw_body["messages"])
    return plan, tokenizer


async def chat_prompt_tokens(principal: Principal, raw_body: dict[str, Any]) -> list[int]:
    """The prompt token ids of a chat body (tools included), under no request limit."""
    body, entry, tokenizer = await _chat_request(principal, raw_body, count_request=False)
    _tools, _text, token_ids = await off_loop(chat_prompt, body, entry, tokenizer)
    return token_ids


async def prepare_completion(
    principal: Principal, raw_body: dict[str, Any]
) -> tuple[GenerationPlan, ChatTokenizer]:
    """Validate a /v1/completions body and plan it; raises ApiError for anything wrong."""
    body, entry, tokenizer = await _validated("completion", principal, raw_body)
    _check_token_id_fields(body, tokenizer)
    refuse_prompts_too_long(body["prompt"], max_model_len=entry.max_model_len, param="prompt")
    catalog = await acatalog_snapshot()
    plan = await off_loop(_planned, plan_completion, principal, body, entry, tokenizer, catalog)
    return plan, tokenizer


def _planned(
    planner: Callable[..., GenerationPlan],
    principal: Principal,
    body: dict[str, Any],
    entry: ModelEntry,
    tokenizer: ChatTokenizer,
    catalog: CatalogSnapshot,
) -> GenerationPlan:
    """``planner``'s plan, its prompts matched against the model's declared shared prefixes."""
    plan = planner(principal, body, entry, tokenizer)
    mark_shared_prefixes(
        plan,
        client_salt=body.get("cache_salt"),
        catalog=catalog,
        tokenizer=tokenizer,
        tool_parser=entry.tool_parser,
    )
    return plan


# Prompts ------------------------------------------------------------------------------------


def render_chat_prompt(
    tokenizer: ChatTokenizer, body: dict[str, Any], tools: ToolSetup | None = None
) -> tuple[str, list[int]]:
    """The chat template applied to ``messages`` (and ``tools``, see inference/tools/
    rendering.py): (prompt text, prompt token ids)."""
    messages, tool_kwargs = template_input(body["messages"], tools, tokenizer.chat_template)
    explicit = body.get("chat_template_kwargs") or {}
    thinking = thinking_kwargs(body.get("reasoning_effort"), tokenizer.chat_template, explicit)
    try:
        text = tokenizer.render_chat(
            messages,
            add_generation_prompt=body.get("add_generation_prompt", True),
            **{**thinking, **explicit, **tool_kwargs},
        )
    except TokenizerError:
        raise
    except Exception as exc:  # the template choked on what the request gave it (as vLLM: 400)
        raise invalid_request(
            f"The chat template failed on these messages: {type(exc).__name__}: {exc}",
            param="chat_template_kwargs" if body.get("chat_template_kwargs") else "messages",
        ) from exc
    # The template writes the special tokens itself (BOS included when the model wants one).
    return text, tokenizer.encode(text, add_special_tokens=False)


def completion_prompts(
    tokenizer: ChatTokenizer,
    prompts: list[str | list[int]],
    *,
    add_special_tokens: bool = True,
    with_text: bool = True,
) -> list[tuple[str, list[int]]]:
    """Each prompt as (text, token ids); token-id prompts are checked against the vocabulary.
    A token-id prompt's text is "" unless ``with_text`` (only ``echo`` shows it): decoding
    1,000 ids was 15 of the 16 samples py-spy took in planning under a flood of such prompts,
    about 0.3 ms of the API's event loop thread per request (2026-11-26)."""
    out = []
    for prompt in prompts:
        if isinstance(prompt, str):
            out.append((prompt, tokenizer.encode(prompt, add_special_tokens=add_special_tokens)))
        else:
            check_token_ids(tokenizer, prompt, param="prompt")
            text = tokenizer.decode(prompt, skip_special_tokens=False) if with_text else ""
            out.append((text, list(prompt)))
    return out
