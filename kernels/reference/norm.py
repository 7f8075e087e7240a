"""Reference RMSNorm, plain and with the residual add fused in front (Llama's pre-norm)."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [num_rows, hidden], weight: [hidden]  ->  [num_rows, hidden] in x's dtype.

    Rounds like transformers' LlamaRMSNorm: normalise in float32, cast to x's dtype, then scale.
    """
    variance = x.float().pow(2).mean(-1, keepdim=True)
    normed = (x.float() * torch.rsqrt(variance + eps)).to(x.dtype)
    return weight * normed


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(rms_norm(x + residual), x + residual)``; the sum is the next residual.

    x, residual: [num_rows, hidden], weight: [hidden]. The sum is rounded to x's dtype first,
    as transformers does between decoder layers.
    """
    summed = x + residual
    return rms_norm(summed, weight, eps), summed
