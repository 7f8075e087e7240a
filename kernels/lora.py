"""Triton LoRA shrink and expand over a batch of tokens that use different adapters.

Tokens are grouped by adapter slot once per step (``lora_segments``); the grid is
(token tile, slot[, output tile]) and each program reads one slot's weights for up to BLOCK_M of
that slot's tokens, so a weight tile is shared by the tokens of its segment. Programs past their
slot's token count exit without work; tokens with slot -1 are in no segment. The grid is sized
from num_tokens, never from the counts, so no value is read back to the host and the launch can
be captured in a CUDA graph.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.availability import interpreting
from kernels.reference.lora import LoRASegments, lora_segments
from kernels.validation import (
    FLOAT_DTYPES,
    check_contiguous,
    check_dim,
    check_dtype,
    check_last_dim_contiguous,
    check_launchable,
    check_ndim,
    check_same_device,
    check_same_dtype,
    dot_precision,
    next_power_of_two,
)

__all__ = ["LoRASegments", "lora_expand", "lora_segments", "lora_shrink"]

MAX_RANK = 64


@triton.jit
def _segment_rows(
    sorted_token_ids_ptr, num_tokens_per_slot_ptr, slot_start_ptr, tile, slot, BLOCK_M: tl.constexpr
):
    """The token ids of this tile of the slot's segment, and which of them exist."""
    count = tl.load(num_tokens_per_slot_ptr + slot)
    start = tl.load(slot_start_ptr + slot)
    index = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = index < count
    tokens = tl.load(sorted_token_ids_ptr + start + index, mask=row_mask, other=0).to(tl.int64)
    return tokens, row_mask, tile * BLOCK_M < count


@triton.jit
def _lora_shrink_kernel(
    x_ptr,
    lora_a_ptr,
    out_ptr,
    sorted_token_ids_ptr,
    num_tokens_per_slot_ptr,
    slot_start_ptr,
    x_stride_token,
    hidden_in,
    RANK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_R: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    slot = tl.program_id(1).to(tl.int64)
    tokens, row_mask, has_rows = _segment_rows(
        sorted_token_ids_ptr, num_tokens_per_slot_ptr, slot_start_ptr, tile, slot, BLOCK_M
    )
    ranks = tl.arange(0, BLOCK_R)
    rank_mask = ranks < RANK
    acc = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
    k_end = tl.where(has_rows, hidden_in, 0)
    for k_start in range(0, k_end, BLOCK_K):
        ks = k_start + tl.arange(0, BLOCK_K)
        k_mask = ks < hidden_in
        # [BLOCK_M, BLOCK_K] activations of this slot's tokens
        x = tl.load(
            x_ptr + tokens[:, None] * x_stride_token + ks[None, :],
            mask=row_mask[:, None] & k_mask[None, :],
            other=0.0,
        )
        # [BLOCK_K, BLOCK_R] = lora_a[slot, :, ks].T
        a = tl.load(
            lora_a_ptr + slot * RANK * hidden_in + ranks[None, :] * hidden_in + ks[:, None],
            mask=k_mask[:, None] & rank_mask[None, :],
            other=0.0,
        )
        acc += tl.dot(x, a, input_precision=DOT_PRECISION)
    tl.store(
        out_ptr + tokens[:, None] * RANK + ranks[None, :],
        acc,
        mask=row_mask[:, None] & rank_mask[None, :],
    )


@triton.jit
def _lora_expand_kernel(
    y_ptr,
    lora_b_ptr,
    out_ptr,
    sorted_token_ids_ptr,
    num_tokens_per_slot_ptr,
    slot_start_ptr,
    out_stride_token,
    hidden_out,
    RANK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_R: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    slot = tl.program_id(1).to(tl.int64)
    tokens, row_mask, has_rows = _segment_rows(
        sorted_token_ids_ptr, num_tokens_per_slot_ptr, slot_start_ptr, tile, slot, BLOCK_M
    )
    # A program with no tokens masks every column, so it loads no weights.
    cols = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < tl.where(has_rows, hidden_out, 0)
    ranks = tl.arange(0, BLOCK_R)
    rank_mask = ranks < RANK
    # [BLOCK_M, BLOCK_R], rounded to the weights' dtype for the matrix unit
    y = tl.load(
        y_ptr + tokens[:, None] * RANK + ranks[None, :],
        mask=row_mask[:, None] & rank_mask[None, :],
        other=0.0,
    ).to(lora_b_ptr.dtype.element_ty)
    # [BLOCK_R, BLOCK_N] = lora_b[slot, cols, :].T
    b = tl.load(
        lora_b_ptr + slot * hidden_out * RANK + cols[None, :] * RANK + ranks[:, None],
        mask=rank_mask[:, None] & col_mask[None, :],
        other=0.0,
    )
    delta = tl.dot(y, b, input_precision=DOT_PRECISION)
    out_offsets = out_ptr + tokens[:, None] * out_stride_token + cols[None, :]
    out_mask = row_mask[:, None] & col_mask[None, :]
    base = tl.load(out_offsets, mask=out_mask, other=0.0).to(tl.float32)
    tl.store(out_offsets, (base + delta).to(out_ptr.dtype.element_ty), mask=out_mask)


def _check_segments(segments: LoRASegments, num_tokens: int, num_slots: int, device) -> None:
    if not isinstance(segments, LoRASegments):
        raise ValueError("segments must be a LoRASegments from lora_segments()")
    check_dim(
        "segments.token_lora_indices", segments.token_lora_indices, 0, num_tokens, "num_tokens"
    )
    check_dim("segments.sorted_token_ids", segments.sorted_token_ids, 0, num_tokens, "num_tokens")
    check_dim(
        "segments.num_tokens_per_slot", segments.num_tokens_per_slot, 0, num_slots, "num_slots"
    )
    check_dim("segments.slot_start", segments.slot_start, 0, num_slots, "num_slots")
    for name in ("sorted_token_ids", "num_tokens_per_slot", "slot_start"):
        tensor = getattr(segments, name)
        check_dtype(f"segments.{name}", tensor, (torch.int32,))
        check_contiguous(f"segments.{name}", tensor)
        if tensor.device != device:
            raise ValueError(f"segments.{name} must be on {device}; got {tensor.device}")


def _check_rank(rank: int) -> None:
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"LoRA rank must be between 1 and {MAX_RANK}; got {rank}")


def lora_shrink(
    x: torch.Tensor,  # [num_tokens, hidden_in]
    lora_a: torch.Tensor,  # [num_slots, max_rank, hidden_in]
    segments: LoRASegments,
) -> torch.Tensor:  # [num_tokens, max_rank] float32, zero rows for tokens without adapter
    """Project each token down through its adapter's A. See kernels.reference.lora."""
    check_ndim("x", x, 2, "[num_tokens, hidden_in]")
    check_ndim("lora_a", lora_a, 3, "[num_slots, max_rank, hidden_in]")
    check_dtype("x", x, FLOAT_DTYPES)
    check_same_dtype(["x", "lora_a"], [x, lora_a])
    check_dim("lora_a", lora_a, 2, x.shape[1], "hidden_in, as in x")
    _check_rank(lora_a.shape[1])
    check_last_dim_contiguous("x", x)
    check_contiguous("lora_a", lora_a)
    check_same_device(["x", "lora_a"], [x, lora_a])
    _check_segments(segments, x.shape[0], lora_a.shape[0], x.device)
    check_launchable(x)
    num_tokens, hidden_in = x.shape
    num_slots, rank = lora_a.shape[0], lora_a.shape[1]
    out = torch.zeros(num_tokens, rank, dtype=torch.float32, device=x.device)
    if num_tokens == 0:
        return out
    block_m, block_k = (16, 32) if interpreting() else (16, 256)
    _lora_shrink_kernel[(triton.cdiv(num_tokens, block_m), num_slots)](
        x,
        lora_a,
        out,
        segments.sorted_token_ids,
        segments.num_tokens_per_slot,
        segments.slot_start,
        x.stride(0),
        hidden_in,
        RANK=rank,
        BLOCK_M=block_m,
        BLOCK_K=block_k,
        BLOCK_R=max(16, next_power_of_two(rank)),
        DOT_PRECISION=dot_precision(x.dtype),
    )
    return out


def lora_expand(
    y: torch.Tensor,  # [num_tokens, max_rank] float32, from lora_shrink
    lora_b: torch.Tensor,  # [num_slots, hidden_out, max_rank]
    segments: LoRASegments,
    output: torch.Tensor,  # [num_tokens, hidden_out]; a column slice of a wider output is fine
) -> torch.Tensor:
    """Add each token's ``y @ lora_b[slot].T`` into ``output`` in place, and return it."""
    check_ndim("y", y, 2, "[num_tokens, max_rank]")
    check_ndim("lora_b", lora_b, 3, "[num_slots, hidden_out, max_rank]")
    check_ndim("output", output, 2, "[num_tokens, hidden_out]")
    check_dtype("y", y, (torch.float32,))
    check_dtype("lora_b", lora_b, FLOAT_DTYPES)
    check_same_dtype(["lora_b", "output"], [lora_b, output])
    check_dim("lora_b", lora_b, 2, y.shape[1], "max_rank, as in y")
    check_dim("lora_b", lora_b, 1, output.shape[1], "hidden_out, as in output")
    check_dim("output", output, 0, y.shape[0], "num_tokens, as in y")
    _check_rank(y.shape[1])
    check_contiguous("y", y)
    check_contiguous("lora_b", lora_b)
    check_last_dim_contiguous("output", output)
    check_same_device(["y", "lora_b", "output"], [y, lora_b, output])
    _check_segments(segments, y.shape[0], lora_b.shape[0], y.device)
    check_launchable(output)
    num_tokens, rank = y.shape
    num_slots, hidden_out = lora_b.shape[0], lora_b.shape[1]
    if num_tokens == 0:
        return output
    block_m, block_n = (16, 32) if interpreting() else (16, 128)
    grid = (triton.cdiv(num_tokens, block_m), num_slots, triton.cdiv(hidden_out, block_n))
    _lora_expand_kernel[grid](
        y,
        lora_b,
        output,
        segments.sorted_token_ids,
        segments.num_tokens_per_slot,
        segments.slot_start,
        output.stride(0),
        hidden_out,
        RANK=rank,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_R=max(16, next_power_of_two(rank)),
        DOT_PRECISION=dot_precision(lora_b.dtype),
    )
    return output
