"""PyTorch references for the native CPU kernels (kernels/cpu/*.cpp), with the same
signatures, and the int4 packing both sides share. RMSNorm and SiLU-and-mul have theirs in
kernels/reference (the Triton kernels' references take the same arguments).

int8: ``qweight`` [N, K] int8 and ``scales`` [N] float32, w = q * scale per output row.
int4: ``packed`` [N, K / 2] uint8 in blocks of 32 along K (GGUF's Q4_1 order: byte j of a
block holds weight j in its low nibble, weight j + 16 in its high one), ``scales`` and ``mins``
[N, K / 32] float16, w = q * scale + min with q in 0..15 (computed in float32).

int4 weights may also come with their rows interleaved in groups of ``ROW_GROUP`` (the
``interleave`` argument, 1 for the plain order above): the same tensors, shapes and bytes,
reordered so that the AVX2 kernel reads eight output rows' codes, scales and mins for one
block side by side (``interleave_int4_rows``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

INT4_BLOCK = 32
# Rows an interleaved int4 weight groups together (kernels/cpu/quantized_linear.cpp).
ROW_GROUP = 8
# Bytes of a block's codes that one row contributes at a time to an interleaved group.
_CHUNK = 4


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """[N, K] codes 0..15 -> [N, K / 2] uint8 in the kernels' block order."""
    n, k = codes.shape
    if k % INT4_BLOCK:
        raise ValueError(f"int4 weights come in blocks of {INT4_BLOCK} columns; this has {k}")
    blocks = codes.to(torch.uint8).reshape(n, k // INT4_BLOCK, 2, INT4_BLOCK // 2)
    return (blocks[:, :, 0] | (blocks[:, :, 1] << 4)).reshape(n, k // 2).contiguous()


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of ``pack_int4``: [N, K / 2] uint8 -> [N, K] uint8 codes."""
    n, half = packed.shape
    blocks = packed.reshape(n, half // (INT4_BLOCK // 2), 1, INT4_BLOCK // 2)
    return torch.cat((blocks & 15, blocks >> 4), dim=2).reshape(n, half * 2)


def interleave_int4_rows(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An int4 weight with its rows interleaved in groups of ``ROW_GROUP`` (N a multiple of it).

    For a group of rows and a block of 32 weights: the block's 16 code bytes in four chunks of
    four, each chunk as eight rows' four bytes side by side (32 bytes: what one AVX2 register
    takes, a row per 32-bit lane); then the next block. Scales and mins: a group's eight values
    for one block side by side, block after block.
    """
    n, half = packed.shape
    if n % ROW_GROUP:
        raise ValueError(f"interleaving takes rows in groups of {ROW_GROUP}; this has {n}")
    blocks = half // (INT4_BLOCK // 2)
    chunks = INT4_BLOCK // 2 // _CHUNK
    codes = packed.reshape(n // ROW_GROUP, ROW_GROUP, blocks, chunks, _CHUNK).permute(0, 2, 3, 1, 4)
    return codes.reshape(n, half).contiguous(), _group_blocks(scales), _group_blocks(mins)


def deinterleave_int4_rows(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inverse of ``interleave_int4_rows``."""
    n, half = packed.shape
    blocks = half // (INT4_BLOCK // 2)
    chunks = INT4_BLOCK // 2 // _CHUNK
    codes = packed.reshape(n // ROW_GROUP, blocks, chunks, ROW_GROUP, _CHUNK).permute(0, 3, 1, 2, 4)
    return (
        codes.reshape(n, half).contiguous(),
        _group_blocks(scales, inverse=True),
        _group_blocks(mins, inverse=True),
    )


def _group_blocks(per_block: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """[N, blocks] per-block values with each group's ``ROW_GROUP`` rows side by side per block
    (``inverse``: back to rows in order)."""
    n, blocks = per_block.shape
    inner = (blocks, ROW_GROUP) if inverse else (ROW_GROUP, blocks)
    grouped = per_block.reshape(n // ROW_GROUP, *inner).transpose(1, 2)
    return grouped.reshape(n, blocks).contiguous()


def _plain(packed, scales, mins, interleave: int):
    if interleave == 1:
        return packed, scales, mins
    if interleave != ROW_GROUP:
        raise ValueError(f"int4 rows are interleaved by 1 or {ROW_GROUP}, got {interleave}")
    return deinterleave_int4_rows(packed, scales, mins)


def int4_dequantize(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, interleave: int = 1
) -> torch.Tensor:
    """The float32 [N, K] matrix an int4 weight stands for."""
    packed, scales, mins = _plain(packed, scales, mins, interleave)
    codes = unpack_int4(packed).float()
    n, k = codes.shape
    blocks = codes.reshape(n, k // INT4_BLOCK, INT4_BLOCK)
    return (blocks * scales.float()[..., None] + mins.float()[..., None]).reshape(n, k)


def int8_linear(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """x [M, K] float32 -> [M, N]: x times the dequantized int8 weight, transposed."""
    return F.linear(x, qweight.float() * scales[:, None])


def float_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [M, K] float32 -> [M, N]: x times the float32 weight, transposed (the kernel takes the
    same sums in a fixed order per row; this one rounds as BLAS does)."""
    return F.linear(x, weight)


def quantize_activations(x: torch.Tensor) -> torch.Tensor:
    """x [M, K] float32 as the int4 kernel sees it: per block of 32, codes round(x / dx) with
    dx = max|x| / 127 (llama.cpp's Q8_1), times dx again."""
    m, k = x.shape
    blocks = x.reshape(m, k // INT4_BLOCK, INT4_BLOCK)
    dx = blocks.abs().amax(-1, keepdim=True) / 127.0
    codes = torch.where(dx > 0, torch.round(blocks / dx), torch.zeros_like(blocks))
    return (codes * dx).reshape(m, k)


def int4_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    mins: torch.Tensor,
    interleave: int = 1,
) -> torch.Tensor:
    """x [M, K] float32 -> [M, N], as the kernel computes it: the codes times the scales
    against x's 8-bit blocks (``quantize_activations``), plus each block's min times the exact
    sum of its activations."""
    packed, scales, mins = _plain(packed, scales, mins, interleave)
    n, k = packed.shape[0], packed.shape[1] * 2
    codes = unpack_int4(packed).float().reshape(n, k // INT4_BLOCK, INT4_BLOCK)
    scaled_codes = (codes * scales.float()[..., None]).reshape(n, k)
    block_mins = mins.float().repeat_interleave(INT4_BLOCK, dim=1)
    return F.linear(quantize_activations(x), scaled_codes) + F.linear(x, block_mins)


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(query, key) [T, heads, head_dim] rotated by position, transformers' rotate_half layout;
    ``cos`` and ``sin`` are [max_position, head_dim / 2] tables (engine.layers.rotary)."""

    def rotate(x: torch.Tensor) -> torch.Tensor:
        c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    return rotate(query), rotate(key)
