"""Resumed requests: a request re-submitted after the engine running it died.

The API re-submits the prompt followed by the tokens the dead engine had already delivered,
with ``resumed_output_tokens`` saying how many of the trailing prompt tokens those are, and
the budget left in ``max_tokens``/``min_tokens``. Here the engine turns those tokens back into
output tokens of the new ``Request``, so that everything that depends on the output so far
behaves exactly as if the request had never moved:

- repetition penalty over prompt and output, presence and frequency penalties over the output
  only (engine/sample/penalties.py reads ``prompt_token_ids`` and ``output_token_ids``);
- ``min_tokens`` (stop tokens banned while ``num_output_tokens < min_tokens``) and
  ``max_tokens`` (length stop), which count the output so far again;
- a seeded generator, advanced by one draw per token already sampled (``advance_generator``).

The tokens are computed again as part of the prefill, like a preempted request's, and never
delivered a second time.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from engine.request import Request


def check_resumed(num_prompt_tokens: int, resumed_output_tokens: int) -> None:
    """Raise ValueError unless the resumed tokens leave at least one real prompt token."""
    if type(resumed_output_tokens) is not int or resumed_output_tokens < 0:
        raise ValueError("resumed_output_tokens must be a non-negative integer")
    if resumed_output_tokens >= num_prompt_tokens:
        raise ValueError(
            f"resumed_output_tokens ({resumed_output_tokens}) must be less than the number of "
            f"prompt tokens ({num_prompt_tokens})"
        )


def mark_resumed(request: Request, num_resumed: int) -> None:
    """Make the last ``num_resumed`` prompt tokens of a new ``request`` its output tokens."""
    if num_resumed <= 0:
        return
    request.num_prompt_tokens -= num_resumed
    request.output_token_ids = request.all_token_ids[request.num_prompt_tokens :]
    # Already delivered by the engine that died.
    request.num_delivered_tokens = request.num_resumed_tokens = num_resumed
    # The API sent the budget left; counted from the original start of the output again.
    request.max_tokens += num_resumed
    params = request.sampling_params
    request.sampling_params = dataclasses.replace(
        params,
        min_tokens=params.min_tokens + num_resumed,
        max_tokens=None if params.max_tokens is None else params.max_tokens + num_resumed,
    )


def advance_generator(generator: torch.Generator, num_draws: int) -> None:
    """Advance a seeded generator past ``num_draws`` sampling steps of the sampler.

    The sampler draws one uniform number per sampled token of a seeded request
    (``draw_uniform``, engine/sample/sampler.py), so the same draws here, one at a time as
    the sampler makes them, leave the generator where the undisturbed request's was.
    """
    if num_draws <= 0:
        return
    import torch

    from engine.sample.sampler import draw_uniform

    scratch = torch.empty(1, device=generator.device)
    for _ in range(num_draws):
        draw_uniform(scratch, generator)
