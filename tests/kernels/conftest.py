"""Kernel tests: Triton kernels against their PyTorch references.

Without a GPU the kernels run in Triton's CPU interpreter. Triton decides between interpreter
and compiler when a ``@triton.jit`` function is defined: for our kernels when their module is
imported, for triton's own library (``tl.sum``, ``tl.zeros``, ...) when triton is imported. So
the root conftest imports triton with ``TRITON_INTERPRET=1`` before anything else can
(tests/support/triton_mode.py), and the variable is set only per test afterwards, so the rest
of the suite never sees it set.
"""

from __future__ import annotations

import importlib
import types

import pytest
import torch

from kernels.cpu import native_ops, unavailable_reason
from tests.support.kernel_cases import ON_GPU
from tests.support.triton_mode import import_triton_for_the_interpreter

TRITON_MODULES = (
    "kernels.activation",
    "kernels.cache",
    "kernels.decode_attention",
    "kernels.lora",
    "kernels.norm",
    "kernels.prefill_attention",
    "kernels.rotary",
)


INTERPRETER_IN_PROCESS = import_triton_for_the_interpreter()
if not INTERPRETER_IN_PROCESS:  # the root conftest imports triton first; this is a safeguard
    raise RuntimeError(
        "triton was imported before TRITON_INTERPRET=1 could be set, so the kernel tests cannot "
        "run on this CPU machine; see tests/support/triton_mode.py"
    )


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


@pytest.fixture(scope="module")
def ops():
    """``torch.ops.platform_cpu``, the native CPU kernels (kernels/cpu)."""
    found = native_ops()
    # This machine kind has a C++ compiler: failing to build here is a bug, not a skip.
    assert found is not None, unavailable_reason()
    return found


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
    return "cuda" if ON_GPU else "cpu"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
