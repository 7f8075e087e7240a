"""Whether the Triton kernels can run here: a CUDA device, or the interpreter on CPU for tests."""

from __future__ import annotations

import importlib.util
import os

import torch


def triton_unavailable_reason() -> str | None:
    """Why Triton kernels cannot run in this process, or None when they can."""
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None
    if not torch.cuda.is_available():
        return "no CUDA device is available (set TRITON_INTERPRET=1 to run kernels on CPU)"
    return None


def triton_kernels_available() -> bool:
    """True when CUDA is available, or TRITON_INTERPRET=1 makes Triton run kernels on CPU."""
    return triton_unavailable_reason() is None


def interpreting() -> bool:
    """True when Triton runs kernels through its CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET") == "1"
