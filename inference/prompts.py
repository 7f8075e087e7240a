"""Turn request bodies into prompt token ids, and refuse prompts the model cannot take.

Rendering and tokenizing cost time in proportion to the prompt, so they run off the event
loop (``off_loop``: a few dedicated threads; long texts are tokenized without the GIL), and a
prompt that cannot fit the context however it tokenizes is refused before any of that
(``refuse_prompts_too_long``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.conf import settings

from engine.text.tokenizer import ChatTokenizer, TokenizerError
from inference.errors import ApiError, invalid_request
from inference.tools import ToolSetup, template_input

T = TypeVar("T")
_executor: ThreadPoolExecutor | None = None


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
