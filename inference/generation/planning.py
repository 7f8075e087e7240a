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

import asyncio
import functools
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.conf import settings

from controlplane.access.admission import check_request_limits
from controlplane.access.principals import Principal, engine_cache_salt
from engine.text.tokenizer import ChatTokenizer, TokenizerError
from inference.catalog import ModelEntry, resolve_model, tokenizer_for
from inference.errors import ApiError, invalid_request
from inference.generation.plan import GenerationPlan
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
T = TypeVar("T")
_executor: ThreadPoolExecutor | None = None


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


async def _validated(
    kind: str, principal: Principal, raw_body: dict[str, Any]
) -> tuple[dict[str, Any], ModelEntry, ChatTokenizer]:
    """The cheap refusals first: the body's fields, the tenant's request limits (429), the
    model; the template and the tokenizer run later, off the event loop."""
    body = validate_body(SERIALIZERS[kind], raw_body)
    await check_request_limits(principal, model=body["model"])
    entry, tokenizer = await load_generation_model(principal, body["model"])
    return body, entry, tokenizer


def _check_stop_token_ids(body: dict[str, Any], tokenizer: ChatTokenizer) -> None:
    if body.get("stop_token_ids"):
        check_token_ids(tokenizer, body["stop_token_ids"], param="stop_token_ids")


async def prepare_chat(
    principal: Principal, raw_body: dict[str, Any]
) -> tuple[GenerationPlan, ChatTokenizer]:
    """Validate a /v1/chat/completions body and plan it; raises ApiError for anything wrong."""
    body, entry, tokenizer = await _validated("chat", principal, raw_body)
    if entry.completions_only:
        raise invalid_request(
            f"`{entry.name}` is a base model without a chat template, so it serves "
            "/v1/completions only; send it a prompt there.",
            param="model",
        )
    _check_stop_token_ids(body, tokenizer)
    length = chat_text_length(body["messages"])
    refuse_text_too_long(length, max_model_len=entry.max_model_len, param="messages")
    return await off_loop(plan_chat, principal, body, entry, tokenizer), tokenizer


async def prepare_completion(
    principal: Principal, raw_body: dict[str, Any]
) -> tuple[GenerationPlan, ChatTokenizer]:
    """Validate a /v1/completions body and plan it; raises ApiError for anything wrong."""
    body, entry, tokenizer = await _validated("completion", principal, raw_body)
    _check_stop_token_ids(body, tokenizer)
    refuse_prompts_too_long(body["prompt"], max_model_len=entry.max_model_len, param="prompt")
    return await off_loop(plan_completion, principal, body, entry, tokenizer), tokenizer


# Prompts ------------------------------------------------------------------------------------


async def off_loop(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` in one of the API's ``API_TOKENIZER_THREADS`` threads.

    A few threads, not the default executor: each one holds the GIL for its Python work
    (templates), so fewer of them leave the event loop a larger share.
    """
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(
            max_workers=settings.API_TOKENIZER_THREADS, thread_name_prefix="tokenize"
        )
    call = functools.partial(function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_executor, call)


def render_chat_prompt(
    tokenizer: ChatTokenizer, body: dict[str, Any], tools: ToolSetup | None = None
) -> tuple[str, list[int]]:
    """The chat template applied to ``messages`` (and ``tools``, see inference/tools/
    rendering.py): (prompt text, prompt token ids)."""
    messages, tool_kwargs = template_input(body["messages"], tools, tokenizer.chat_template)
    try:
        text = tokenizer.render_chat(
            messages,
            add_generation_prompt=body.get("add_generation_prompt", True),
            **{**(body.get("chat_template_kwargs") or {}), **tool_kwargs},
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
    tokenizer: ChatTokenizer, prompts: list[str | list[int]], *, add_special_tokens: bool = True
) -> list[tuple[str, list[int]]]:
    """Each prompt as (text, token ids); token-id prompts are checked against the vocabulary."""
    out = []
    for prompt in prompts:
        if isinstance(prompt, str):
            out.append((prompt, tokenizer.encode(prompt, add_special_tokens=add_special_tokens)))
        else:
            check_token_ids(tokenizer, prompt, param="prompt")
            out.append((tokenizer.decode(prompt, skip_special_tokens=False), list(prompt)))
    return out


def check_token_ids(tokenizer: ChatTokenizer, token_ids: list[int], *, param: str) -> None:
    vocab = tokenizer.vocab_size
    if not token_ids or max(token_ids) < vocab:  # max() runs in C; the loop only to name one
        return
    bad = next(t for t in token_ids if t >= vocab)
    raise invalid_request(
        f"Token id {bad} is out of vocabulary (this model has {vocab} tokens).", param=param
    )


def refuse_prompts_too_long(
    prompts: list[str | list[int]], *, max_model_len: int, param: str
) -> None:
    """Context-length 400 for a prompt that cannot fit however it tokenizes: as many token
    ids as the context, or more text than the context holds (``refuse_text_too_long``)."""
    for prompt in prompts:
        if isinstance(prompt, str):
            refuse_text_too_long(len(prompt), max_model_len=max_model_len, param=param)
        elif len(prompt) >= max_model_len:
            raise _context_exceeded(max_model_len, f"{len(prompt)} tokens", param)


def refuse_text_too_long(num_chars: int, *, max_model_len: int, param: str) -> None:
    """Context-length 400, before tokenizing, for text longer than the context holds at
    PROMPT_MAX_CHARS_PER_TOKEN characters a token."""
    if num_chars > max_model_len * settings.PROMPT_MAX_CHARS_PER_TOKEN:
        raise _context_exceeded(max_model_len, f"{num_chars} characters", param)


def chat_text_length(messages: list[dict[str, Any]]) -> int:
    """Characters of the messages' text: the template's output has at least as many."""
    return sum(
        len(m["content"])
        + len(m.get("name") or "")
        + sum(len(c["function"]["arguments"]) for c in m.get("tool_calls") or ())
        for m in messages
    )


def _context_exceeded(max_model_len: int, size: str, param: str) -> ApiError:
    return ApiError(
        f"This model's maximum context length is {max_model_len} tokens. However, your "
        f"{param} ({size}) cannot fit in it. Please reduce the length of the {param}.",
        status=400,
        param=param,
        code="context_length_exceeded",
    )


def max_tokens_for(
    *, prompt_tokens: int, requested: int | None, max_model_len: int, param: str
) -> int:
    """How many tokens may be generated; 400 when the prompt plus request exceeds the context."""
    if prompt_tokens >= max_model_len or (
        requested is not None and prompt_tokens + requested > max_model_len
    ):
        total = prompt_tokens + (requested or 0)
        raise ApiError(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {total} tokens ({prompt_tokens} in the {param}, {requested or 0} in "
            "the completion). Please reduce the length of the prompt or of the completion.",
            status=400,
            param=param,
            code="context_length_exceeded",
        )
    if prompt_tokens == 0:
        raise invalid_request("The prompt is empty after tokenization.", param=param)
    return requested if requested is not None else max_model_len - prompt_tokens
