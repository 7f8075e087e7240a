"""OpenAI response objects: completions, chat completions, their stream chunks, usage, logprobs.

Pure functions from plain values to the JSON-ready dicts OpenAI's API returns.
"""

from __future__ import annotations

from typing import Any


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def _top(entry) -> list[tuple[int, str, float]]:
    return list(getattr(entry, "top", None) or [])


def chat_logprobs(entries) -> dict[str, Any]:
    """Per-token logprobs in chat format: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    return {
        "content": [
            {
                "token": entry.token,
                "logprob": entry.logprob,
                "bytes": list(entry.token.encode()),
                "top_logprobs": [
                    {"token": text, "logprob": logprob, "bytes": list(text.encode())}
                    for _token_id, text, logprob in _top(entry)
                ],
            }
            for entry in entries
        ]
    }


def completion_logprobs(entries, *, text_offset: int) -> dict[str, Any]:
    """Per-token logprobs in the legacy completions format; offsets count characters."""
    tokens, token_logprobs, top_logprobs, offsets = [], [], [], []
    for entry in entries:
        tokens.append(entry.token)
        token_logprobs.append(entry.logprob)
        top_logprobs.append({text: logprob for _token_id, text, logprob in _top(entry)})
        offsets.append(text_offset)
        text_offset += len(entry.token)
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }


def completion_object(
    *, kind: str, request_id: str, created: int, model: str, choices: list[dict], usage: dict
) -> dict[str, Any]:
    """A whole (non-streamed) response: ``chat.completion`` or ``text_completion``."""
    return {
        "id": request_id,
        "object": "chat.completion" if kind == "chat" else "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage,
        "system_fingerprint": None,
    }


def chat_choice(
    *, index: int, text: str, logprobs: dict | None, finish_reason: str | None, stop_reason
) -> dict[str, Any]:
    return {
        "index": index,
        "message": {"role": "assistant", "content": text, "refusal": None},
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    }


def completion_choice(
    *, index: int, text: str, logprobs: dict | None, finish_reason: str | None, stop_reason
) -> dict[str, Any]:
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    }


def chat_chunk(
    *,
    request_id: str,
    created: int,
    model: str,
    choices: list[dict],
    usage=None,
    with_usage: bool = False,
) -> dict[str, Any]:
    chunk = {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
        "system_fingerprint": None,
    }
    if with_usage:
        chunk["usage"] = usage
    return chunk


def chat_chunk_choice(
    *,
    index: int,
    delta: dict,
    logprobs: dict | None = None,
    finish_reason: str | None = None,
    stop_reason=None,
) -> dict[str, Any]:
    choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    return choice


def completion_chunk(
    *,
    request_id: str,
    created: int,
    model: str,
    choices: list[dict],
    usage=None,
    with_usage: bool = False,
) -> dict[str, Any]:
    chunk = {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "system_fingerprint": None,
    }
    if with_usage:
        chunk["usage"] = usage
    return chunk


def model_object(
    *, name: str, created: int, max_model_len: int, root: str, parent: str | None = None
) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "llm-platform",
        "root": root,
        "parent": parent,
        "max_model_len": max_model_len,
    }
