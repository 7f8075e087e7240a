"""Weight-only quantized linear layers on torch's own CPU kernels.

One stream of decode is bound by reading the weights: every token reads all of them once, so
fewer bytes per weight is the biggest single-stream lever on a CPU. Activations stay in the
engine's dtype; only the stored weights shrink:

- ``int8``: symmetric, one scale per output channel, ``aten._weight_int8pack_mm``.
- ``int4``: asymmetric (scale and zero) per group of ``group_size`` input channels,
  ``aten._weight_int4pack_mm_for_cpu`` on the layout ``_convert_weight_to_int4pack_for_cpu``
  packs. With groups of 32 this is GGUF's Q4_1 grid (``d * q + m``), so a checkpoint
  converted from a Q4_1 GGUF is re-packed onto the very 4-bit codes the file stored (its
  fp16 ``d`` and ``m`` become the kernel's bf16 scale and zero: rounded to 8 mantissa bits).

``dequantize_int8`` and ``dequantize_int4_codes`` give the float matrix a quantized weight
stands for, in plain PyTorch: dequantize-then-``F.linear`` is the reference the kernels are
tested against (tests/engine/test_quantized_linear.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

QUANTIZATION_METHODS = ("int8", "int4")
# The kernels' fast paths take bf16 activations (AVX512-BF16/AMX where the CPU has them); with
# fp32 ones they fall back to paths 5-30x slower. So quantized layers compute in bf16 and hand
# back the caller's dtype.
COMPUTE_DTYPE = torch.bfloat16
INT4_GROUP_SIZES = (32, 64, 128, 256)  # what the int4 CPU kernel accepts


@dataclass(slots=True)
class Int8Weight:
    qweight: torch.Tensor  # [out, in] int8
    scales: torch.Tensor  # [out], COMPUTE_DTYPE

    @property
    def shape(self) -> torch.Size:
        return self.qweight.shape


@dataclass(slots=True)
class Int4Weight:
    packed: torch.Tensor  # the kernel's packed layout (two 4-bit values per byte)
    scales_and_zeros: torch.Tensor  # [in // group_size, out, 2], COMPUTE_DTYPE
    group_size: int
    out_features: int
    in_features: int

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.out_features, self.in_features))


QuantizedWeight = Int8Weight | Int4Weight


def quantize_int8(weight: torch.Tensor) -> Int8Weight:
    """[out, in] float -> int8 with one scale per output row (round to nearest)."""
    w = weight.float()
    scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return Int8Weight(q.contiguous(), scales.to(COMPUTE_DTYPE))


def int4_group_size(in_features: int, preferred: int = 32) -> int:
    """The group size to use for a matrix with ``in_features`` columns (ValueError if none fits)."""
    for size in (preferred, *INT4_GROUP_SIZES):
        if size in INT4_GROUP_SIZES and in_features % size == 0:
            return size
    raise ValueError(f"int4 needs in_features divisible by 32; this matrix has {in_features}")


def int4_codes(
    weight: torch.Tensor, group_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[out, in] float -> (codes 0..15 [out, in], scale and zero [out, in // group_size]) with
    w ~= (q - 8) * scale + zero.

    Min/max per group (scale = (max - min) / 15): the group's extremes land exactly on codes
    0 and 15, which is how Q4_1 blocks are made, so Q4_1-derived weights come back unchanged.
    """
    out_features, in_features = weight.shape
    if in_features % group_size:
        raise ValueError(f"in_features {in_features} is not a multiple of group {group_size}")
    w = weight.float().reshape(out_features, in_features // group_size, group_size)
    lo = w.amin(dim=-1)
    hi = w.amax(dim=-1)
    scale = ((hi - lo) / 15.0).clamp(min=1e-12)
    q = torch.round((w - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32)
    # The kernel computes (q - 8) * scale + zero, so zero sits at code 8.
    return q.reshape(out_features, in_features), scale, lo + 8.0 * scale


def dequantize_int4_codes(
    codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor
) -> torch.Tensor:
    """The float32 matrix ``int4_codes`` stands for: (q - 8) * scale + zero per group."""
    out_features, in_features = codes.shape
    groups = codes.reshape(out_features, scale.shape[1], -1).float()
    return ((groups - 8.0) * scale[..., None] + zero[..., None]).reshape(out_features, in_features)


def quantize_int4(weight: torch.Tensor, group_size: int = 32) -> Int4Weight:
    """[out, in] float -> the int4 CPU kernel's packed codes and its scale/zero table."""
    codes, scale, zero = int4_codes(weight, group_size)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.contiguous(), 1)
    scales_and_zeros = torch.stack((scale.t(), zero.t()), dim=-1).to(COMPUTE_DTYPE).contiguous()
    return Int4Weight(packed, scales_and_zeros, group_size, *weight.shape)


def quantize(weight: torch.Tensor, method: str) -> QuantizedWeight:
    if method == "int8":
        return quantize_int8(weight)
    if method == "int4":
        return quantize_int4(weight, int4_group_size(weight.shape[1]))
    raise ValueError(f"quantization must be one of {', '.join(QUANTIZATION_METHODS)}")


def linear(
    x: torch.Tensor, weight: torch.Tensor | QuantizedWeight, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``F.linear`` for float weights, the quantized CPU kernel for quantized ones (computed in
    COMPUTE_DTYPE, returned in ``x``'s dtype)."""
    if isinstance(weight, torch.Tensor):
        return F.linear(x, weight, bias)
    rows = x.reshape(-1, x.shape[-1]).to(COMPUTE_DTYPE)
    if isinstance(weight, Int8Weight):
        y = torch.ops.aten._weight_int8pack_mm(rows, weight.qweight, weight.scales)
    else:
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            rows, weight.packed, weight.group_size, weight.scales_and_zeros
        )
    y = y.to(x.dtype)
    if bias is not None:
        y = y + bias
    return y.view(*x.shape[:-1], y.shape[-1])


def dequantize_int8(weight: Int8Weight) -> torch.Tensor:
    """The float [out, in] matrix an int8 weight stands for (in COMPUTE_DTYPE)."""
    return weight.qweight.to(weight.scales.dtype) * weight.scales[:, None]


def weight_bytes(weight: torch.Tensor | QuantizedWeight) -> int:
    """Bytes the weight occupies in memory (what one decode step reads)."""
    if isinstance(weight, torch.Tensor):
        return weight.numel() * weight.element_size()
    tensors = (
        (weight.qweight, weight.scales)
        if isinstance(weight, Int8Weight)
        else (weight.packed, weight.scales_and_zeros)
    )
    return sum(t.numel() * t.element_size() for t in tensors)
