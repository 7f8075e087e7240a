"""The (device, dtype) cases every kernel test runs, and the tolerances for each dtype."""

from __future__ import annotations

import pytest
import torch

# (device, dtype) pairs. The interpreter gets bf16 arithmetic wrong, so CPU runs fp32 and fp16;
# a GPU runs the same comparisons natively, bf16 included. With a GPU present the interpreter
# cases are left to CPU CI: kernels are built for one mode per process.
ON_GPU = torch.cuda.is_available()
_INTERPRETER_ONLY = pytest.mark.skipif(ON_GPU, reason="interpreter cases run on CPU machines")
CASES = [
    pytest.param("cpu", torch.float32, id="interpret-fp32", marks=_INTERPRETER_ONLY),
    pytest.param("cpu", torch.float16, id="interpret-fp16", marks=_INTERPRETER_ONLY),
    pytest.param("cuda", torch.float32, id="cuda-fp32", marks=pytest.mark.gpu),
    pytest.param("cuda", torch.float16, id="cuda-fp16", marks=pytest.mark.gpu),
    pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=pytest.mark.gpu),
]


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """assert_close tolerances for a kernel against its float32-internal reference."""
    return {
        torch.float32: {"atol": 2e-5, "rtol": 2e-5},
        torch.float16: {"atol": 2e-3, "rtol": 2e-3},
        torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
    }[dtype]
