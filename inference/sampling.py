"""Validated request fields -> the engine's SamplingOptions (vLLM's names).

Only the fields a client sent are passed on; everything else takes SamplingOptions' defaults,
the platform's one source of sampling defaults.
"""

from __future__ import annotations

from typing import Any

from engine.protocol import SamplingOptions, StructuredOutput
from inference.errors import invalid_request

# Body fields that go to the engine as they are, when the client sent them (null: not sent).
PASSED_THROUGH = (
    "n",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "stop_token_ids",
    "ignore_eos",
    "min_tokens",
    "speculative_decoding",
    "logit_bias",
    "allowed_token_ids",
    "prompt_logprobs",
)


def build_sampling(
    body: dict[str, Any],
    *,
    max_tokens: int,
    logprobs: int | None,
    structured: StructuredOutput | None = None,
) -> SamplingOptions:
    """The SamplingOptions of one request; ``max_tokens`` is already fitted to the context,
    ``structured`` already validated (inference/structured_outputs.py)."""
    given = {name: body[name] for name in PASSED_THROUGH if body.get(name) is not None}
    options = SamplingOptions(
        **given, max_tokens=max_tokens, logprobs=logprobs, structured=structured
    )
    if options.min_tokens > max_tokens:
        raise invalid_request(
            f"min_tokens ({options.min_tokens}) must be at most max_tokens ({max_tokens}).",
            param="min_tokens",
        )
    return options
