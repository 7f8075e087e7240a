"""Validated request fields -> the engine's SamplingOptions (vLLM names, OpenAI defaults)."""

from __future__ import annotations

from typing import Any

from inference.errors import invalid_request


def sampling_fields(body: dict[str, Any], *, max_tokens: int, logprobs: int | None) -> dict:
    """The keyword arguments of ``engine.protocol.SamplingOptions`` for one request."""

    def given(name: str, default):
        value = body.get(name)
        return default if value is None else value

    min_tokens = body.get("min_tokens", 0)
    if min_tokens > max_tokens:
        raise invalid_request(
            f"min_tokens ({min_tokens}) must be at most max_tokens ({max_tokens}).",
            param="min_tokens",
        )
    return {
        "n": body.get("n", 1),
        "temperature": given("temperature", 1.0),
        "top_p": given("top_p", 1.0),
        "top_k": given("top_k", -1),
        "min_p": given("min_p", 0.0),
        "presence_penalty": given("presence_penalty", 0.0),
        "frequency_penalty": given("frequency_penalty", 0.0),
        "repetition_penalty": given("repetition_penalty", 1.0),
        "seed": body.get("seed"),
        "stop_token_ids": list(body.get("stop_token_ids") or []),
        "ignore_eos": body.get("ignore_eos", False),
        "max_tokens": max_tokens,
        "min_tokens": min_tokens,
        "logprobs": logprobs,
    }


def build_sampling(body: dict[str, Any], *, max_tokens: int, logprobs: int | None):
    from engine.protocol import SamplingOptions

    return SamplingOptions(**sampling_fields(body, max_tokens=max_tokens, logprobs=logprobs))
