"""Reference SiLU-and-mul: the gated activation of Llama-family MLPs."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` where ``x`` holds ``[gate | up]`` side by side.

    x: [num_tokens, 2 * intermediate]  ->  [num_tokens, intermediate]
    Rounds like transformers (SiLU result in x's dtype, then the product) so greedy parity holds.
    """
    if x.dim() != 2 or x.shape[-1] % 2:
        raise ValueError(f"x must be [num_tokens, 2 * intermediate]; got shape {tuple(x.shape)}")
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up
