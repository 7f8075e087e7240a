"""Kernel tests: Triton kernels against their PyTorch references.

Without a GPU the kernels run in Triton's CPU interpreter. Triton decides between interpreter
and compiler when a ``@triton.jit`` function is defined: for our kernels when their module is
imported, for triton's own library (``tl.sum``, ``tl.zeros``, ...) when triton is imported. So
this conftest imports triton with ``TRITON_INTERPRET=1`` if nothing has imported it yet, and
sets the variable only per test afterwards, so the rest of the suite never sees it set. If
another test module imported triton first, the interpreter cannot run in this process: the
tests here are then skipped and ``test_interpreter_fallback.py`` runs them all in a fresh one.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

import pytest
import torch

TRITON_MODULES = (
    "kernels.activation",
    "kernels.cache",
    "kernels.decode_attention",
    "kernels.lora",
    "kernels.norm",
    "kernels.prefill_attention",
    "kernels.rotary",
)


def _import_triton_for_the_interpreter() -> bool:
    """True when this process can run Triton's interpreter (or needs none: a GPU is here)."""
    if torch.cuda.is_available():
        return True
    if "triton" in sys.modules:
        import triton.language.standard

        return type(triton.language.standard.zeros).__name__ == "InterpretedFunction"
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton.language
    finally:
        if previous is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = previous
    return True


INTERPRETER_IN_PROCESS = _import_triton_for_the_interpreter()
_HERE = Path(__file__).parent
_FALLBACK_TEST = "test_interpreter_fallback.py"


def pytest_collection_modifyitems(config, items):
    if INTERPRETER_IN_PROCESS:
        return
    skip = pytest.mark.skip(
        reason=f"triton was imported before TRITON_INTERPRET=1 could be set: {_FALLBACK_TEST} "
        "runs these tests in a fresh process"
    )
    for item in items:
        path = Path(str(item.fspath))
        if path.parent == _HERE and path.name != _FALLBACK_TEST:
            item.add_marker(skip)


# (device, dtype) pairs. The interpreter gets bf16 arithmetic wrong, so CPU runs fp32 and fp16;
# a GPU runs the same comparisons natively, bf16 included. With a GPU present the interpreter
# cases are left to CPU CI: kernels are built for one mode per process.
_ON_GPU = torch.cuda.is_available()
_INTERPRETER_ONLY = pytest.mark.skipif(_ON_GPU, reason="interpreter cases run on CPU machines")
CASES = [
    pytest.param("cpu", torch.float32, id="interpret-fp32", marks=_INTERPRETER_ONLY),
    pytest.param("cpu", torch.float16, id="interpret-fp16", marks=_INTERPRETER_ONLY),
    pytest.param("cuda", torch.float32, id="cuda-fp32", marks=pytest.mark.gpu),
    pytest.param("cuda", torch.float16, id="cuda-fp16", marks=pytest.mark.gpu),
    pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=pytest.mark.gpu),
]


@pytest.fixture(autouse=True)
def _interpret_without_gpu(monkeypatch):
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def _load(module_name: str, interpret: bool) -> types.ModuleType:
    from triton.runtime.interpreter import InterpretedFunction

    module = importlib.import_module(module_name)
    kernel_types = {
        type(value)
        for value in vars(module).values()
        if type(value).__name__ in ("JITFunction", "InterpretedFunction")
    }
    if interpret and any(t is not InterpretedFunction for t in kernel_types):
        module = importlib.reload(module)
    return module


@pytest.fixture
def triton_ops(_interpret_without_gpu) -> types.SimpleNamespace:
    """The Triton kernels, built for the interpreter when there is no GPU."""
    interpret = not torch.cuda.is_available()
    names = {}
    for module_name in TRITON_MODULES:
        module = _load(module_name, interpret)
        names.update({name: getattr(module, name) for name in module.__all__})
    return types.SimpleNamespace(**names)


@pytest.fixture
def device() -> str:
    """Where the single-configuration tests run their kernels: the GPU if any, else the CPU."""
    return "cuda" if _ON_GPU else "cpu"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """assert_close tolerances for a kernel against its float32-internal reference."""
    return {
        torch.float32: {"atol": 2e-5, "rtol": 2e-5},
        torch.float16: {"atol": 2e-3, "rtol": 2e-3},
        torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
    }[dtype]
