"""`import kernels` works without triton or a GPU, and says when Triton kernels can run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels

REPO = Path(__file__).resolve().parents[2]


def test_import_without_triton_uses_references_and_explains_why():
    script = (
        "import sys; sys.modules['triton'] = None\n"  # makes `import triton` fail
        "import torch, kernels, kernels.reference as ref\n"
        "assert not kernels.triton_kernels_available()\n"
        "print(kernels.triton_unavailable_reason())\n"
        "x = torch.randn(2, 8)\n"
        "print(ref.rms_norm(x, torch.ones(8), 1e-6).shape)\n"
        "assert 'triton' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    assert "the triton package is not installed" in result.stdout
    assert "torch.Size([2, 8])" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_availability_follows_the_interpreter_switch(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not kernels.triton_kernels_available()
    assert "no CUDA device" in kernels.triton_unavailable_reason()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert kernels.triton_kernels_available()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_kernel_on_cpu_without_interpreter_fails_clearly(triton_ops, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="Triton kernels cannot run here: no CUDA device"):
        triton_ops.silu_and_mul(torch.randn(2, 8))


def test_every_public_kernel_has_a_reference_with_the_same_signature(triton_ops):
    import inspect

    import kernels.reference as ref

    for name in kernels.__all__:
        if name.startswith("triton_"):
            continue
        triton_params = list(inspect.signature(getattr(triton_ops, name)).parameters)
        reference_params = list(inspect.signature(getattr(ref, name)).parameters)
        assert triton_params == reference_params, name
