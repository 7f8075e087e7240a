"""lora_delta: grouped by adapter segments, equal to a per-token reference."""

from __future__ import annotations

import pytest
import torch

from engine.lora import ops
from engine.lora.ops import LoraSegments, add_lora_, lora_delta


@pytest.fixture(params=["loop", "padded"], autouse=True)
def path(request, monkeypatch):
    """Run every test on both ways of executing segments."""
    if request.param == "loop":
        monkeypatch.setattr(ops, "BATCHED_MIN_SEGMENTS", 1_000)
    else:
        monkeypatch.setattr(ops, "BATCHED_MIN_SEGMENTS", 1)
    return request.param


def _stacks(num_slots=4, rank=6, d_in=10, d_out=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    lora_a = torch.randn(num_slots, rank, d_in, generator=g)
    lora_b = torch.randn(num_slots, d_out, rank, generator=g)
    scalings = torch.rand(num_slots, generator=g) + 0.5
    return lora_a, lora_b, scalings


def _per_token(x, slots, lora_a, lora_b, scalings):
    rows = []
    for token, slot in zip(x, slots.tolist(), strict=True):
        if slot < 0:
            rows.append(torch.zeros(lora_b.shape[1]))
        else:
            rows.append(scalings[slot] * (lora_b[slot] @ (lora_a[slot] @ token)))
    return torch.stack(rows)


@pytest.mark.parametrize(
    "slots",
    [
        [0, 0, 0, 1, 1, -1, -1, 2, 3, 3],  # grouped: plain slices
        [2, -1, 0, 2, 1, 0, -1, 3, 1, 2],  # interleaved: gather and scatter
        [-1] * 10,
        [3] * 10,
        [3, 3, 1, -1, 1, 0, 3, 1, -1, 3],  # slots 0, 1, 3: not consecutive
    ],
    ids=["grouped", "interleaved", "no-adapter", "one-adapter", "slot-gap"],
)
def test_lora_delta_equals_per_token_reference(slots):
    lora_a, lora_b, scalings = _stacks()
    x = torch.randn(len(slots), 10)
    token_slots = torch.tensor(slots)
    got = lora_delta(x, token_slots, lora_a, lora_b, scalings)
    torch.testing.assert_close(got, _per_token(x, token_slots, lora_a, lora_b, scalings))


def test_segments_are_slices_when_grouped_and_skip_base_tokens(path):
    segments = LoraSegments.build([1, 1, -1, 0, 0, 0], ranks=[4, 2], scales=[1.0, 2.0])
    assert segments.order is None
    assert [(s.slot, s.start, s.end, s.rank) for s in segments.segments] == [
        (1, 0, 2, 2),
        (0, 3, 6, 4),
    ]
    interleaved = LoraSegments.build([1, 0, 1], ranks=[4, 2], scales=[1.0, 2.0])
    assert interleaved.order.tolist() == [1, 0, 2]
    assert [(s.slot, s.start, s.end) for s in interleaved.segments] == [(0, 0, 1), (1, 1, 3)]
    if path == "padded":
        assert interleaved.padded.token_index.tolist() == [1, 0, 0, 2]  # slot 0 padded to 2
        assert interleaved.padded.scale.flatten().tolist() == [1.0, 0.0, 2.0, 2.0]


def test_padding_is_skipped_when_it_would_cost_more(monkeypatch):
    monkeypatch.setattr(ops, "BATCHED_MIN_SEGMENTS", 3)
    decodes = LoraSegments.build([0, 1, 2, 3], ranks=[4] * 4, scales=[1.0] * 4)
    assert decodes.padded is not None and decodes.padded.max_len == 1
    with_prefill = LoraSegments.build([0, 1, 2] + [3] * 20, ranks=[4] * 4, scales=[1.0] * 4)
    assert with_prefill.padded is None


def test_rank_below_padding_uses_only_its_rows():
    lora_a, lora_b, scalings = _stacks(rank=8)
    lora_a[:, 3:] = 0  # slot ranks are 3: padded rows are zero in real slots
    lora_b[:, :, 3:] = 0
    x = torch.randn(5, 10)
    token_slots = torch.tensor([0, 1, 1, 2, -1])
    segments = LoraSegments.build(token_slots, ranks=[3] * 4, scales=scalings.tolist())
    got = lora_delta(x, token_slots, lora_a, lora_b, scalings, segments=segments)
    torch.testing.assert_close(got, _per_token(x, token_slots, lora_a, lora_b, scalings))


def test_zero_b_adds_nothing():
    lora_a, lora_b, _ = _stacks()
    x = torch.randn(6, 10)
    y = torch.randn(6, 7)
    expected = y.clone()
    segments = LoraSegments.build([0, 1, 2, 3, 0, 1], ranks=[6] * 4, scales=[1.0] * 4)
    add_lora_(y, x, lora_a, torch.zeros_like(lora_b), segments)
    torch.testing.assert_close(y, expected)


def test_packed_stack_equals_separate_modules():
    """q, k and v packed in one A (ranks stacked) and a block-diagonal B give q|k|v deltas."""
    rank, d_in, outs = 3, 10, (8, 4, 4)
    g = torch.Generator().manual_seed(5)
    parts = [
        (torch.randn(2, rank, d_in, generator=g), torch.randn(2, o, rank, generator=g))
        for o in outs
    ]
    packed_a = torch.zeros(2, 3 * rank, d_in)
    packed_b = torch.zeros(2, sum(outs), 3 * rank)
    offset = 0
    for i, (a, b) in enumerate(parts):
        packed_a[:, i * rank : (i + 1) * rank] = a
        packed_b[:, offset : offset + b.shape[1], i * rank : (i + 1) * rank] = b
        offset += b.shape[1]
    scalings = torch.tensor([0.5, 2.0])
    x = torch.randn(7, d_in)
    token_slots = torch.tensor([1, 0, -1, 1, 0, 0, 1])
    segments = LoraSegments.build(token_slots, ranks=[rank, rank], scales=scalings.tolist())
    got = lora_delta(x, token_slots, packed_a, packed_b, scalings, segments=segments, num_packed=3)
    expected = torch.cat([lora_delta(x, token_slots, a, b, scalings) for a, b in parts], dim=1)
    torch.testing.assert_close(got, expected)


def test_bad_shapes_are_refused_with_a_message():
    lora_a, lora_b, scalings = _stacks()
    with pytest.raises(ValueError, match="input features"):
        lora_delta(torch.randn(3, 11), torch.tensor([0, 0, 0]), lora_a, lora_b, scalings)
    segments = LoraSegments.build([0, 0], ranks=[6] * 4, scales=[1.0] * 4)
    with pytest.raises(ValueError, match="segments cover 2"):
        add_lora_(torch.zeros(3, 7), torch.randn(3, 10), lora_a, lora_b, segments)
