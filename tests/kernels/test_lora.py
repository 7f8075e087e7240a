"""LoRA shrink and expand for batches mixing adapters, including tokens with no adapter."""

from __future__ import annotations

import pytest
import torch

import kernels.reference as ref
from tests.support.kernel_cases import CASES, tolerance


def _adapters(num_slots, rank, hidden_in, hidden_out, dtype, device):
    # Slot 1 holds a smaller adapter, zero-padded to the slot rank as the engine stores it.
    lora_a = torch.randn(num_slots, rank, hidden_in) / hidden_in**0.5
    lora_b = torch.randn(num_slots, hidden_out, rank) / rank**0.5
    lora_a[1, rank // 2 :] = 0
    lora_b[1, :, rank // 2 :] = 0
    return lora_a.to(dtype).to(device), lora_b.to(dtype).to(device)


@pytest.mark.parametrize(("device", "dtype"), CASES)
@pytest.mark.parametrize("rank", [8, 64])
@pytest.mark.parametrize("order", ["mixed", "sorted"])
def test_shrink_then_expand_matches_reference(triton_ops, device, dtype, rank, order):
    num_tokens, num_slots, hidden_in, hidden_out = 37, 3, 48, 40
    indices = torch.randint(-1, num_slots, (num_tokens,))
    if order == "sorted":
        indices = indices.sort().values
    segments = ref.lora_segments(indices.to(device), num_slots)
    x = torch.randn(num_tokens, hidden_in).to(dtype).to(device)
    lora_a, lora_b = _adapters(num_slots, rank, hidden_in, hidden_out, dtype, device)

    y = triton_ops.lora_shrink(x, lora_a, segments)
    expected_y = ref.lora_shrink(x, lora_a, segments)
    torch.testing.assert_close(y, expected_y, **tolerance(dtype))
    assert torch.all(y[indices.to(device) < 0] == 0)

    # Expand into the middle columns of a wider fused output (a q/k/v slice).
    wide = torch.randn(num_tokens, hidden_out + 24).to(dtype).to(device)
    expected = wide.clone()
    ref.lora_expand(expected_y, lora_b, segments, expected[:, 8 : 8 + hidden_out])
    returned = triton_ops.lora_expand(expected_y, lora_b, segments, wide[:, 8 : 8 + hidden_out])
    torch.testing.assert_close(wide, expected, **tolerance(dtype))
    assert returned.data_ptr() == wide[:, 8:].data_ptr()
    no_adapter = indices.to(device) < 0
    torch.testing.assert_close(wide[no_adapter], expected[no_adapter], atol=0, rtol=0)


def test_batch_without_adapters_is_left_unchanged(triton_ops, device):
    indices = torch.full((5,), -1, device=device)
    segments = ref.lora_segments(indices, 2)
    lora_a, lora_b = _adapters(2, 16, 32, 24, torch.float32, device)
    y = triton_ops.lora_shrink(torch.randn(5, 32, device=device), lora_a, segments)
    assert torch.all(y == 0)
    output = torch.randn(5, 24, device=device)
    before = output.clone()
    triton_ops.lora_expand(y, lora_b, segments, output)
    assert torch.equal(output, before)


def test_lora_segments_group_tokens_by_slot():
    indices = torch.tensor([2, -1, 0, 2, 0, -1, 2])
    segments = ref.lora_segments(indices, 4)
    assert segments.num_tokens_per_slot.tolist() == [2, 0, 3, 0]
    starts = segments.slot_start.tolist()
    order = segments.sorted_token_ids.tolist()
    assert sorted(order[starts[0] : starts[0] + 2]) == [2, 4]
    assert sorted(order[starts[2] : starts[2] + 3]) == [0, 3, 6]


def test_lora_rejects_bad_arguments(triton_ops):
    segments = ref.lora_segments(torch.tensor([0, 1, -1]), 2)
    x = torch.randn(3, 32)
    with pytest.raises(ValueError, match="LoRA rank must be between 1 and 64; got 128"):
        triton_ops.lora_shrink(x, torch.randn(2, 128, 32), segments)
    with pytest.raises(ValueError, match=r"lora_a.shape\[2\] \(hidden_in, as in x\) must be 32"):
        triton_ops.lora_shrink(x, torch.randn(2, 8, 16), segments)
    with pytest.raises(ValueError, match=r"num_tokens_per_slot.shape\[0\] \(num_slots\) must be 3"):
        triton_ops.lora_shrink(x, torch.randn(3, 8, 32), segments)
    with pytest.raises(ValueError, match="y must have dtype float32"):
        triton_ops.lora_expand(
            torch.randn(3, 8).half(), torch.randn(2, 4, 8), segments, torch.randn(3, 4)
        )
    with pytest.raises(ValueError, match="segments must be a LoRASegments"):
        triton_ops.lora_shrink(x, torch.randn(2, 8, 32), tuple(segments))
