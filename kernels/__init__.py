"""Triton kernels for the GPU path, each beside a PyTorch reference with the same signature.

``from kernels import rms_norm`` gives the Triton version (CUDA, or the Triton interpreter
when ``TRITON_INTERPRET=1``); ``from kernels.reference import rms_norm`` gives the PyTorch one,
which runs anywhere. Both names take the same arguments, so a caller picks a namespace once.
Importing this package needs neither triton nor a GPU: kernel modules load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from kernels.availability import triton_kernels_available, triton_unavailable_reason

# Public kernel name -> module that holds its Triton implementation.
_KERNEL_MODULES = {
    "paged_decode_attention": "kernels.decode_attention",
    "paged_prefill_attention": "kernels.prefill_attention",
    "reshape_and_cache": "kernels.cache",
    "rms_norm": "kernels.norm",
    "fused_add_rms_norm": "kernels.norm",
    "apply_rotary_embedding": "kernels.rotary",
    "silu_and_mul": "kernels.activation",
    "lora_shrink": "kernels.lora",
    "lora_expand": "kernels.lora",
}
# Torch-only helpers that both the kernels and the references use.
_HELPER_MODULES = {
    "rotary_cos_sin_cache": "kernels.reference.rotary",
    "lora_segments": "kernels.reference.lora",
    "LoRASegments": "kernels.reference.lora",
}

__all__ = [
    *_KERNEL_MODULES,
    *_HELPER_MODULES,
    "triton_kernels_available",
    "triton_unavailable_reason",
]


def __getattr__(name: str) -> Any:
    module_name = _KERNEL_MODULES.get(name) or _HELPER_MODULES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'kernels' has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)
