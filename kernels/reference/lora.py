"""Reference LoRA shrink and expand for a batch whose tokens use different adapters.

Adapters live in device slots: ``lora_a`` is [num_slots, max_rank, hidden_in] and ``lora_b``
[num_slots, hidden_out, max_rank], zero-padded past each adapter's own rank, with the adapter's
``alpha / rank`` scaling folded into ``lora_b`` when the slot is loaded. A token's slot is -1
when it uses no adapter. ``lora_segments`` groups tokens by slot once per step; every LoRA layer
of that step reuses the result.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class LoRASegments(NamedTuple):
    """The step's tokens grouped by adapter slot (built by ``lora_segments``)."""

    token_lora_indices: torch.Tensor  # [num_tokens] int32, slot of each token, -1 = no adapter
    sorted_token_ids: torch.Tensor  # [num_tokens] int32, token ids ordered by slot
    num_tokens_per_slot: torch.Tensor  # [num_slots] int32
    slot_start: torch.Tensor  # [num_slots] int32, where each slot's tokens begin in sorted ids


def lora_segments(token_lora_indices: torch.Tensor, num_slots: int) -> LoRASegments:
    """Group tokens by slot without a host sync, so it can run inside a captured CUDA graph."""
    if token_lora_indices.dim() != 1:
        raise ValueError(
            f"token_lora_indices must be 1-D [num_tokens]; got {tuple(token_lora_indices.shape)}"
        )
    if num_slots <= 0:
        raise ValueError(f"num_slots must be positive; got {num_slots}")
    indices = token_lora_indices.to(torch.int32)
    # A stable sort puts the no-adapter tokens (-1) first; they belong to no segment.
    sorted_token_ids = torch.sort(indices, stable=True).indices.to(torch.int32)
    slots = torch.arange(num_slots, dtype=torch.int32, device=indices.device)
    # A comparison table instead of bincount, which reads its maximum back to the host.
    counts = (indices[None, :] == slots[:, None]).sum(dim=1, dtype=torch.int32)
    num_unassigned = (indices < 0).sum(dtype=torch.int32)
    slot_start = (torch.cumsum(counts, dim=0, dtype=torch.int32) - counts + num_unassigned).to(
        torch.int32
    )
    return LoRASegments(indices, sorted_token_ids, counts, slot_start)


def lora_shrink(x: torch.Tensor, lora_a: torch.Tensor, segments: LoRASegments) -> torch.Tensor:
    """``x @ lora_a[slot].T`` per token; zeros for tokens without an adapter.

    x:      [num_tokens, hidden_in]
    lora_a: [num_slots, max_rank, hidden_in]
    returns [num_tokens, max_rank] float32
    """
    out = torch.zeros(x.shape[0], lora_a.shape[1], dtype=torch.float32, device=x.device)
    indices = segments.token_lora_indices
    for slot in range(lora_a.shape[0]):
        rows = (indices == slot).nonzero().squeeze(1)
        if rows.numel():
            out[rows] = x[rows].float() @ lora_a[slot].float().T
    return out


def lora_expand(
    y: torch.Tensor, lora_b: torch.Tensor, segments: LoRASegments, output: torch.Tensor
) -> torch.Tensor:
    """Add ``y @ lora_b[slot].T`` into ``output`` in place (and return it); -1 tokens unchanged.

    y:      [num_tokens, max_rank] float32, from ``lora_shrink``
    lora_b: [num_slots, hidden_out, max_rank]
    output: [num_tokens, hidden_out], may be a column slice of a wider projection output
    """
    indices = segments.token_lora_indices
    for slot in range(lora_b.shape[0]):
        rows = (indices == slot).nonzero().squeeze(1)
        if rows.numel():
            # Round y to the weights' dtype as the kernel feeds it to the matrix unit.
            delta = y[rows].to(lora_b.dtype).float() @ lora_b[slot].float().T
            output[rows] = (output[rows].float() + delta).to(output.dtype)
    return output
