"""What ``LLMEngine.add_request`` refuses, with the ValueError a caller can show: prompts the
model cannot take, budgets past the context, malformed shared-prefix or fair-share fields."""

from __future__ import annotations

from engine.core.block_hash import PublicPrefix
from engine.sampling_params import SamplingParams


def check_prompt(
    prompt: list[int], params: SamplingParams, *, vocab_size: int, max_model_len: int
) -> int:
    """The request's max_tokens (the context's room when unset)."""
    if not isinstance(params, SamplingParams):
        raise ValueError("params must be a SamplingParams")
    if not prompt:
        raise ValueError("the prompt is empty: at least one token is needed")
    # set(map(type, ...)) runs in C: a Python-level loop over a long prompt cost as much as
    # hashing it.
    if set(map(type, prompt)) != {int} or min(prompt) < 0 or max(prompt) >= vocab_size:
        raise ValueError(f"prompt token ids must be integers in [0, {vocab_size})")
    named = params.token_ids_named
    if named and max(named) >= vocab_size:
        raise ValueError(
            f"token id {max(named)} in logit_bias or allowed_token_ids is outside the "
            f"vocabulary [0, {vocab_size})"
        )
    if len(prompt) >= max_model_len:
        raise ValueError(
            f"the prompt has {len(prompt)} tokens; max_model_len is {max_model_len}, which "
            "must also leave room for at least one generated token"
        )
    if params.max_tokens is None:
        return max_model_len - len(prompt)
    if len(prompt) + params.max_tokens > max_model_len:
        raise ValueError(
            f"prompt ({len(prompt)} tokens) + max_tokens ({params.max_tokens}) exceeds "
            f"max_model_len ({max_model_len})"
        )
    return params.max_tokens


def check_public_prefix(public_prefix: PublicPrefix | None, num_prompt_tokens: int) -> None:
    if public_prefix is None:
        return
    if not isinstance(public_prefix, PublicPrefix):
        raise ValueError("public_prefix must be a PublicPrefix")
    if public_prefix.num_tokens > num_prompt_tokens:
        raise ValueError(
            f"the public prefix ({public_prefix.num_tokens} tokens) is longer than the "
            f"prompt ({num_prompt_tokens} tokens)"
        )


def check_weight(weight: float) -> None:
    if not 0 < weight < float("inf"):  # NaN fails too
        raise ValueError(f"weight must be a positive finite number, got {weight!r}")
