"""Weight-only quantized linear layers for CPU serving.

One stream of decode is bound by reading the weights: every token reads all of them once, so
fewer bytes per weight is the biggest single-stream lever on a CPU. Activations stay in
float32 (compute) and come back in the caller's dtype; only the stored weights shrink:

- ``int8``: symmetric, one float32 scale per output channel.
- ``int4``: min and scale per block of 32 input channels, w = q * scale + min (q in 0..15),
  float16 scale and min: GGUF's Q4_1 format, five bits a weight. A checkpoint converted from a
  Q4_1 GGUF is re-packed onto the very codes, scales and mins the file stored. Where the
  native kernel reads it faster (AVX2 and AVX512 builds), the loader interleaves each group of eight
  rows (``kernel_layout``): the same bytes in another order.

Batches of up to ``KERNEL_MAX_ROWS`` rows (decode) run the native matrix-vector kernels of
kernels/cpu (int4 ones quantize the activations to 8 bits per block of 32, as llama.cpp does);
larger batches (prefill chunks) dequantize the matrix and run a float32 GEMM. Where the native
kernels cannot be built, their PyTorch references (kernels/cpu/reference.py) run instead,
correct but slower than float weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.layers.dispatch import cpu_ops
from engine.layers.packed_linear import PackedWeight, packed_linear
from kernels.cpu import native_ops
from kernels.cpu import reference as cpu_reference

QUANTIZATION_METHODS = ("int8", "int4")
INT4_BLOCK = cpu_reference.INT4_BLOCK
# Up to this many rows the kernels (which widen each weight once per 4 rows) beat dequantizing
# the matrix for a GEMM; past it the GEMM wins (decode batches vs prefill chunks).
KERNEL_MAX_ROWS = 8


@dataclass(slots=True)
class Int8Weight:
    qweight: torch.Tensor  # [out, in] int8
    scales: torch.Tensor  # [out] float32

    @property
    def shape(self) -> torch.Size:
        return self.qweight.shape


@dataclass(slots=True)
class Int4Weight:
    packed: torch.Tensor  # [out, in / 2] uint8, kernels/cpu/reference.pack_int4's order
    scales: torch.Tensor  # [out, in / 32] float16
    mins: torch.Tensor  # [out, in / 32] float16
    # 1: rows in order; 8: groups of eight rows interleaved (reference.interleave_int4_rows)
    interleave: int = 1

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.packed.shape[0], self.packed.shape[1] * 2))


QuantizedWeight = Int8Weight | Int4Weight


# Rows quantized at a time: the float temporaries of a whole LM head (49152 x 576 floats in
# SmolLM2, 108 MiB each) would otherwise add several copies to the engine's peak memory.
_INT8_CHUNK_ROWS = 4096


def quantize_int8(weight: torch.Tensor) -> Int8Weight:
    """[out, in] float -> int8 with one scale per output row (round to nearest)."""
    q = torch.empty(weight.shape, dtype=torch.int8)
    scales = torch.empty(weight.shape[0], dtype=torch.float32)
    for start in range(0, weight.shape[0], _INT8_CHUNK_ROWS):
        w = weight[start : start + _INT8_CHUNK_ROWS].float()
        chunk_scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
        q[start : start + len(w)] = torch.round(w / chunk_scales[:, None]).clamp(-127, 127)
        scales[start : start + len(w)] = chunk_scales
    return Int8Weight(q, scales)


def int4_codes(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[out, in] float -> (codes 0..15 [out, in], scale and min [out, in / 32] float16) with
    w ~= q * scale + min.

    Min/max per block (scale = (max - min) / 15), as llama.cpp makes Q4_1 blocks: the block's
    extremes land on codes 0 and 15, so Q4_1-derived weights come back unchanged. Codes are
    rounded against the float16 scale and min the kernels will use.
    """
    out_features, in_features = weight.shape
    if in_features % INT4_BLOCK:
        raise ValueError(
            f"int4 needs in_features to be a multiple of group size {INT4_BLOCK}, got {in_features}"
        )
    w = weight.float().reshape(out_features, in_features // INT4_BLOCK, INT4_BLOCK)
    lo = w.amin(dim=-1).half()
    scale = ((w.amax(dim=-1) - lo.float()) / 15.0).clamp(min=1e-7).half()
    q = torch.round((w - lo.float()[..., None]) / scale.float()[..., None]).clamp(0, 15)
    return q.to(torch.uint8).reshape(out_features, in_features), scale, lo


def quantize_int4(weight: torch.Tensor) -> Int4Weight:
    """[out, in] float -> packed 4-bit codes with a float16 scale and min per block of 32."""
    codes, scale, mins = int4_codes(weight)
    return Int4Weight(cpu_reference.pack_int4(codes), scale.contiguous(), mins.contiguous())


def kernel_layout(weight: Int4Weight) -> Int4Weight:
    """``weight`` in the row order the native int4 kernel of this machine reads fastest."""
    ops = native_ops()
    return interleave_rows(weight, ops.int4_kernel_interleave() if ops is not None else 1)


def interleave_rows(weight: Int4Weight, group: int) -> Int4Weight:
    """``weight`` with its rows interleaved by ``group`` (1 or 8) where its rows divide."""
    if weight.interleave != 1 or group == 1 or weight.shape[0] % group:
        return weight
    packed, scales, mins = cpu_reference.interleave_int4_rows(
        weight.packed, weight.scales, weight.mins
    )
    return Int4Weight(packed, scales, mins, interleave=group)


def quantize(weight: torch.Tensor, method: str) -> QuantizedWeight:
    """``weight`` quantized for this machine's kernels."""
    if method == "int8":
        return quantize_int8(weight)
    if method == "int4":
        return kernel_layout(quantize_int4(weight))
    raise ValueError(f"quantization must be one of {', '.join(QUANTIZATION_METHODS)}")


def linear(
    x: torch.Tensor,
    weight: torch.Tensor | QuantizedWeight | PackedWeight,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``F.linear`` for float weights (the native row-invariant kernel for float32 decode rows
    on a CPU), oneDNN's for packed bfloat16 ones; for quantized ones,
    the native kernels (few rows) or dequantize-then-GEMM (many), computed in float32 and
    returned in ``x``'s dtype."""
    if isinstance(weight, torch.Tensor):
        return _float_linear(x, weight, bias)
    if isinstance(weight, PackedWeight):
        return packed_linear(x, weight, bias)
    rows = x.reshape(-1, x.shape[-1])
    if rows.dtype != torch.float32:
        rows = rows.float()
    y = _quantized_matmul(rows, weight)
    if y.dtype != x.dtype:
        y = y.to(x.dtype)
    if bias is not None:
        y = y + bias
    return y.view(*x.shape[:-1], y.shape[-1])


def _float_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Float32 decode rows on a CPU take the native kernel, whose rows do not depend on each
    other (BLAS picks its kernel, and so its rounding, by the number of rows): the rows of a
    speculative verification step then match the one-row decode bit for bit."""
    ops = cpu_ops(x)
    if (
        ops is None
        or x.dtype != torch.float32
        or weight.dtype != torch.float32
        or x.dim() != 2
        or x.shape[0] > KERNEL_MAX_ROWS
    ):
        return F.linear(x, weight, bias)
    y = ops.float_linear(x, weight)
    return y if bias is None else y + bias


def _quantized_matmul(rows: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    ops = native_ops()
    few = rows.shape[0] <= KERNEL_MAX_ROWS
    if isinstance(weight, Int8Weight):
        if ops is not None and few:
            return ops.int8_linear(rows, weight.qweight, weight.scales)
        # Scaling the output columns is cheaper than scaling the widened matrix.
        return F.linear(rows, weight.qweight.float()) * weight.scales
    impl = ops if ops is not None else cpu_reference
    args = (weight.packed, weight.scales, weight.mins, weight.interleave)
    if few:
        return impl.int4_linear(rows, *args)
    return F.linear(rows, impl.int4_dequantize(*args))


def dequantize(weight: QuantizedWeight) -> torch.Tensor:
    """The float32 [out, in] matrix a quantized weight stands for."""
    if isinstance(weight, Int8Weight):
        return weight.qweight.float() * weight.scales[:, None]
    return cpu_reference.int4_dequantize(
        weight.packed, weight.scales, weight.mins, weight.interleave
    )


def weight_bytes(weight: torch.Tensor | QuantizedWeight | PackedWeight) -> int:
    """Bytes the weight occupies in memory (what one decode step reads)."""
    if isinstance(weight, torch.Tensor):
        return weight.numel() * weight.element_size()
    if isinstance(weight, PackedWeight):
        return weight.shape.numel() * 2  # bfloat16
    tensors = (
        (weight.qweight, weight.scales)
        if isinstance(weight, Int8Weight)
        else (weight.packed, weight.scales, weight.mins)
    )
    return sum(t.numel() * t.element_size() for t in tensors)
