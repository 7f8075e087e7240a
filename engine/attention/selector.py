"""Backend selection in one place.

"auto" picks the Triton backend (kernels/) on CUDA when triton is installed, and the PyTorch
backend everywhere else. "triton" asks for the kernels explicitly: on CUDA, or on CPU only
under ``TRITON_INTERPRET=1`` (Triton's interpreter; slow, for tests). "torch" forces the
PyTorch reference backend on any device.
"""

from __future__ import annotations

import importlib.util

import torch

from engine.attention.backend import AttentionBackend

BACKEND_NAMES = ("auto", "torch", "triton")


def get_attention_backend(device: torch.device | str, name: str = "auto") -> AttentionBackend:
    """The attention implementation for ``device``; a clear error if ``name`` cannot run there."""
    if name not in BACKEND_NAMES:
        raise ValueError(
            f"unknown attention backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}"
        )
    device = torch.device(device)
    if name == "auto":
        use_triton = device.type == "cuda" and importlib.util.find_spec("triton") is not None
        name = "triton" if use_triton else "torch"
    if name == "triton":
        from engine.attention.triton_backend import TritonAttentionBackend

        return TritonAttentionBackend()
    from engine.attention.torch_backend import TorchAttentionBackend

    return TorchAttentionBackend()
