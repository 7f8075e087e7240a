"""SiLU-and-mul kernel against the reference, and the reference against transformers' MLP."""

from __future__ import annotations

import pytest
import torch

import kernels.reference as ref
from tests.support.kernel_cases import CASES, tolerance


@pytest.mark.parametrize(("device", "dtype"), CASES)
@pytest.mark.parametrize("intermediate", [40, 1536])
def test_silu_and_mul_matches_reference(triton_ops, device, dtype, intermediate):
    x = (3 * torch.randn(5, 2 * intermediate)).to(dtype).to(device)
    out = triton_ops.silu_and_mul(x)
    assert out.shape == (5, intermediate)
    torch.testing.assert_close(out, ref.silu_and_mul(x), **tolerance(dtype))


def test_reference_silu_and_mul_equals_transformers_mlp_activation():
    from transformers.activations import ACT2FN

    gate, up = torch.randn(4, 24).half(), torch.randn(4, 24).half()
    expected = ACT2FN["silu"](gate) * up
    got = ref.silu_and_mul(torch.cat([gate, up], dim=-1))
    torch.testing.assert_close(got, expected, atol=0, rtol=0)


def test_silu_and_mul_rejects_odd_width(triton_ops):
    with pytest.raises(ValueError, match=r"x.shape\[1\] must be even"):
        triton_ops.silu_and_mul(torch.randn(2, 7))
    with pytest.raises(ValueError, match="x must have dtype"):
        triton_ops.silu_and_mul(torch.ones(2, 8, dtype=torch.int32))
