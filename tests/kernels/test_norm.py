"""RMSNorm kernels against the reference, and the reference against transformers."""

from __future__ import annotations

import pytest
import torch

import kernels.reference as ref
from tests.support.kernel_cases import CASES, tolerance


@pytest.mark.parametrize(("device", "dtype"), CASES)
@pytest.mark.parametrize("hidden", [48, 64])
def test_rms_norm_matches_reference(triton_ops, device, dtype, hidden):
    x = torch.randn(7, hidden).to(dtype).to(device)
    weight = (1 + 0.1 * torch.randn(hidden)).to(dtype).to(device)
    out = triton_ops.rms_norm(x, weight, 1e-6)
    torch.testing.assert_close(out, ref.rms_norm(x, weight, 1e-6), **tolerance(dtype))


@pytest.mark.parametrize(("device", "dtype"), CASES)
def test_rms_norm_reads_rows_of_a_strided_view(triton_ops, device, dtype):
    # Qwen3's q/k norm normalises head rows of a projection output: rows are not adjacent.
    wide = torch.randn(5, 96).to(dtype).to(device)
    x = wide[:, :32]
    weight = torch.randn(32).to(dtype).to(device)
    out = triton_ops.rms_norm(x, weight, 1e-5)
    torch.testing.assert_close(out, ref.rms_norm(x.contiguous(), weight, 1e-5), **tolerance(dtype))


@pytest.mark.parametrize(("device", "dtype"), CASES)
def test_fused_add_rms_norm_returns_norm_and_new_residual(triton_ops, device, dtype):
    x = torch.randn(9, 40).to(dtype).to(device)
    residual = torch.randn(9, 40).to(dtype).to(device)
    weight = torch.randn(40).to(dtype).to(device)
    out, new_residual = triton_ops.fused_add_rms_norm(x, residual, weight, 1e-6)
    expected_out, expected_residual = ref.fused_add_rms_norm(x, residual, weight, 1e-6)
    torch.testing.assert_close(new_residual, expected_residual, atol=0, rtol=0)
    torch.testing.assert_close(out, expected_out, **tolerance(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_reference_rms_norm_equals_transformers(dtype):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(64, eps=1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(64))
        x = torch.randn(6, 64).to(dtype)
        expected = norm(x)
    torch.testing.assert_close(
        ref.rms_norm(x, norm.weight.detach(), 1e-6), expected, atol=0, rtol=0
    )


def test_rms_norm_rejects_mismatched_weight(triton_ops):
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match=r"weight.shape\[0\] \(hidden\) must be 64; got 32"):
        triton_ops.rms_norm(x, torch.randn(32), 1e-6)
    with pytest.raises(ValueError, match="x, weight must share one dtype"):
        triton_ops.rms_norm(x, torch.randn(64).half(), 1e-6)
    with pytest.raises(ValueError, match="unit stride in its last dimension"):
        triton_ops.rms_norm(torch.randn(64, 4).T, torch.randn(64), 1e-6)
    with pytest.raises(ValueError, match="residual must have x's shape"):
        triton_ops.fused_add_rms_norm(x, torch.randn(3, 64), torch.randn(64), 1e-6)
