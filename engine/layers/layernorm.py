"""RMSNorm computed in fp32 and then scaled, in Hugging Face's order (weight * normed).

On CUDA the Triton kernels run instead (kernels.rms_norm, kernels.fused_add_rms_norm, which
round at the same points), and on a CPU in float32 or bfloat16 the native ops of kernels/cpu;
both take 2-D rows, so a per-head norm ([T, heads, head_dim], Qwen3's q/k norm) is flattened
to rows first.
"""

from __future__ import annotations

import torch

from engine.layers.dispatch import cpu_ops, kernel_ops, use_kernels


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if use_kernels(x):
        rows = x.reshape(-1, x.shape[-1])
        return kernel_ops().rms_norm(rows, weight, eps).view(x.shape)
    ops = cpu_ops(x)
    if ops is not None and weight.dtype == x.dtype:
        return ops.rms_norm(x.reshape(-1, x.shape[-1]), weight, eps).view(x.shape)
    dtype = x.dtype
    x32 = x.float()
    variance = x32.pow(2).mean(-1, keepdim=True)
    return weight * (x32 * torch.rsqrt(variance + eps)).to(dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual + x`` (the new residual) and its RMSNorm, the pattern between sublayers."""
    if use_kernels(x) and x.dim() == 2:
        return kernel_ops().fused_add_rms_norm(x, residual, weight, eps)
    ops = cpu_ops(x)
    if ops is not None and x.dim() == 2 and residual.dtype == weight.dtype == x.dtype:
        return ops.fused_add_rms_norm(x, residual, weight, eps)
    residual = residual + x
    return rms_norm(residual, weight, eps), residual
