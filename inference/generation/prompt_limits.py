"""What fits a model's context: the 400s for prompts too long before and after tokenizing, token
ids outside the vocabulary, and how many tokens a request may generate."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from engine.text.tokenizer import ChatTokenizer
from inference.errors import ApiError, invalid_request


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
        + len(m.get("reasoning_content") or "")
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
    *, prompt_tokens: int, requested: int | None, max_model_len: int, param: str, fit=False
) -> int:
    """How many tokens may be generated; 400 when the prompt plus request exceeds the context
    (with ``fit``, a request beyond what the context leaves is lowered to it instead)."""
    if fit and requested is not None and prompt_tokens < max_model_len:
        requested = min(requested, max_model_len - prompt_tokens)
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
