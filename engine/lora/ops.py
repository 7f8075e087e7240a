"""The batched LoRA product on CPU (PyTorch): y += scale[s] * (x A[s]^T) B[s]^T per token.

Tokens of one batch belong to different adapters (slots) or to none (slot -1). Instead of
gathering a weight matrix per token, tokens are grouped into segments that share a slot; the
grouping (``LoraSegments``) is computed once per step and reused by every LoRA layer.

Two ways to run the segments, same result:
- a loop, one pair of matmuls per segment: few segments (prefill chunks, one or two
  adapters), where each matmul is large;
- padded batches: segments padded to the longest one and run as two ``bmm`` calls, so a
  decode step of many adapters costs seven tensor ops per layer instead of two to four per
  segment (on CPU the per-op overhead, not arithmetic, dominates small segments).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

# Segments at or above which the padded batched path runs (when padding stays modest).
BATCHED_MIN_SEGMENTS = 3


@dataclass(frozen=True, slots=True)
class Segment:
    """Tokens ``[start, end)`` (in grouped order) use ``slot`` with ``rank`` and ``scale``."""

    slot: int
    start: int
    end: int
    rank: int
    scale: float


@dataclass(frozen=True, slots=True)
class PaddedSegments:
    """Segments laid out as [num_segments, max_len] for ``bmm`` (built once per step).

    ``token_index`` [num_segments * max_len] names the batch row of each padded position
    (padding points at row 0); ``scale`` [num_segments, max_len, 1] is the segment's scale
    on real positions and 0 on padding, so padding adds exactly zero when scattered back.
    """

    slots: torch.Tensor  # [num_segments] int64
    # First slot when the segments' slots are consecutive (first, first + 1, ...): the
    # weights are then a view of the stacks, not a gathered copy of them.
    first_slot: int | None
    token_index: torch.Tensor  # [num_segments * max_len] int64
    scale: torch.Tensor  # [num_segments, max_len, 1] float32
    max_len: int
    max_rank: int


@dataclass(frozen=True, slots=True)
class LoraSegments:
    """A step's tokens grouped by slot.

    ``order`` is None when every slot's tokens are already contiguous (then segment bounds
    index the batch directly); otherwise it lists token indices sorted by slot and segment
    bounds index ``order``. Tokens with slot -1 get no segment. ``padded`` is set when the
    batched path pays off (see module docstring).
    """

    order: torch.Tensor | None  # [num_tokens] int64, or None
    segments: tuple[Segment, ...]
    num_tokens: int
    padded: PaddedSegments | None = None

    @classmethod
    def build(
        cls,
        token_slots: torch.Tensor | Sequence[int],
        ranks: Sequence[int],
        scales: Sequence[float],
        *,
        device: torch.device | str = "cpu",
    ) -> LoraSegments:
        """Group ``token_slots`` [num_tokens]; ``ranks``/``scales`` are indexed by slot."""
        slots = token_slots.tolist() if isinstance(token_slots, torch.Tensor) else list(token_slots)
        runs: list[tuple[int, int, int]] = []  # (slot, start, end) of maximal equal runs
        for i, slot in enumerate(slots):
            if runs and runs[-1][0] == slot:
                runs[-1] = (slot, runs[-1][1], i + 1)
            else:
                runs.append((slot, i, i + 1))
        run_slots = [slot for slot, _, _ in runs]
        if len(set(run_slots)) == len(run_slots):
            order, positions = None, None
            segments = tuple(
                Segment(slot, start, end, ranks[slot], float(scales[slot]))
                for slot, start, end in runs
                if slot >= 0
            )
        else:
            tensor = torch.as_tensor(slots, dtype=torch.int64)
            order = torch.argsort(tensor, stable=True)
            positions = order.tolist()
            order = order.to(device)
            counts = torch.bincount(tensor + 1).tolist()  # index 0 counts slot -1
            segments, start = [], counts[0]
            for slot, count in enumerate(counts[1:]):
                if count:
                    segments.append(
                        Segment(slot, start, start + count, ranks[slot], float(scales[slot]))
                    )
                    start += count
            segments = tuple(segments)
        padded = _pad(segments, positions, device)
        return cls(order=order, segments=segments, num_tokens=len(slots), padded=padded)


def _pad(
    segments: tuple[Segment, ...], positions: list[int] | None, device
) -> PaddedSegments | None:
    if len(segments) < BATCHED_MIN_SEGMENTS:
        return None
    lengths = [s.end - s.start for s in segments]
    max_len = max(lengths)
    if max_len * len(segments) > 2 * sum(lengths):
        return None  # one long prefill among decodes: padding would cost more than it saves
    index, scale = [], []
    for seg, length in zip(segments, lengths, strict=True):
        rows = range(seg.start, seg.end)
        if positions is not None:
            rows = [positions[i] for i in rows]
        index.extend(rows)
        index.extend([0] * (max_len - length))
        scale.extend([seg.scale] * length + [0.0] * (max_len - length))
    slot_list = [s.slot for s in segments]
    consecutive = slot_list == list(range(slot_list[0], slot_list[0] + len(slot_list)))
    return PaddedSegments(
        slots=torch.tensor(slot_list, dtype=torch.int64, device=device),
        first_slot=slot_list[0] if consecutive else None,
        token_index=torch.tensor(index, dtype=torch.int64, device=device),
        scale=torch.tensor(scale, dtype=torch.float32, device=device).view(len(segments), -1, 1),
        max_len=max_len,
        max_rank=max(s.rank for s in segments),
    )


def add_lora_(
    y: torch.Tensor,
    x: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    segments: LoraSegments,
    *,
    num_packed: int = 1,
) -> torch.Tensor:
    """Add every token's LoRA delta to ``y`` in place and return ``y``.

    Shapes: y [num_tokens, out], x [num_tokens, in], lora_a [max_loras, num_packed *
    max_rank, in], lora_b [max_loras, out, num_packed * max_rank]. A slot of rank r uses the
    first ``num_packed * r`` rank rows (packed modules such as q/k/v store their r-row blocks
    one after another, and B is block-diagonal over them), so padding costs no arithmetic.
    """
    if x.shape[0] != segments.num_tokens or y.shape[0] != segments.num_tokens:
        raise ValueError(
            f"x has {x.shape[0]} tokens and y {y.shape[0]}, segments cover {segments.num_tokens}"
        )
    if segments.padded is not None:
        return _add_padded_(y, x, lora_a, lora_b, segments.padded, num_packed)
    order = segments.order
    for seg in segments.segments:
        width = seg.rank * num_packed
        a = lora_a[seg.slot, :width]  # [width, in]
        b = lora_b[seg.slot, :, :width]  # [out, width]
        if order is None:
            shrunk = x[seg.start : seg.end] @ a.t()  # [n, width]
            y[seg.start : seg.end].addmm_(shrunk, b.t(), alpha=seg.scale)
        else:
            index = order[seg.start : seg.end]
            shrunk = x.index_select(0, index) @ a.t()
            y.index_add_(0, index, shrunk @ b.t(), alpha=seg.scale)
    return y


def _add_padded_(y, x, lora_a, lora_b, padded: PaddedSegments, num_packed: int) -> torch.Tensor:
    num_segments, width = padded.slots.shape[0], padded.max_rank * num_packed
    xs = x.index_select(0, padded.token_index).view(num_segments, padded.max_len, -1)
    if padded.first_slot is not None:
        chosen = slice(padded.first_slot, padded.first_slot + num_segments)
        a, b = lora_a[chosen, :width], lora_b[chosen, :, :width]  # views
    else:
        a = lora_a[:, :width].index_select(0, padded.slots)  # [S, width, in]
        b = lora_b[:, :, :width].index_select(0, padded.slots)  # [S, out, width]
    shrunk = torch.bmm(xs, a.transpose(1, 2)) * padded.scale.to(x.dtype)  # [S, L, width]
    expanded = torch.bmm(shrunk, b.transpose(1, 2))  # [S, L, out]
    return y.index_add_(0, padded.token_index, expanded.view(-1, y.shape[1]))


def lora_delta(
    x: torch.Tensor,
    token_slots: torch.Tensor,
    lora_a: torch.Tensor,
    lora_b: torch.Tensor,
    scalings: torch.Tensor,
    *,
    segments: LoraSegments | None = None,
    num_packed: int = 1,
) -> torch.Tensor:
    """Every token's LoRA contribution: [num_tokens, out], zero for tokens with slot -1.

    x [num_tokens, in]; token_slots [num_tokens] int (-1: no adapter); lora_a [max_loras,
    num_packed * max_rank, in] and lora_b [max_loras, out, num_packed * max_rank], zero-padded
    beyond each slot's rank; scalings [max_loras] (alpha / r per slot). Pass ``segments``
    (built once per step) to skip regrouping; without it all ranks count as max_rank.
    """
    if x.dim() != 2 or lora_a.dim() != 3 or lora_b.dim() != 3:
        raise ValueError("x must be [num_tokens, in], lora_a and lora_b 3-D stacks of slots")
    if lora_a.shape[2] != x.shape[1]:
        raise ValueError(f"lora_a takes {lora_a.shape[2]} input features, x has {x.shape[1]}")
    if segments is None:
        max_rank = lora_a.shape[1] // num_packed
        segments = LoraSegments.build(
            token_slots, [max_rank] * lora_a.shape[0], scalings.tolist(), device=x.device
        )
    y = x.new_zeros(x.shape[0], lora_b.shape[1])
    return add_lora_(y, x, lora_a, lora_b, segments, num_packed=num_packed)
