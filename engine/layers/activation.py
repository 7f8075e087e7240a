"""SwiGLU activation on a fused gate/up projection (Triton kernel on CUDA, the native op on a
CPU in float32 or bfloat16, PyTorch otherwise)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.layers.dispatch import cpu_ops, kernel_ops, use_kernels


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[T, 2 * I] (gate then up) -> silu(gate) * up, [T, I]."""
    if use_kernels(gate_up) and gate_up.dim() == 2:
        return kernel_ops().silu_and_mul(gate_up)
    ops = cpu_ops(gate_up)
    if ops is not None and gate_up.dim() == 2:
        return ops.silu_and_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up
