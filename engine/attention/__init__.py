"""Attention over the paged KV cache, behind a backend interface.

``get_attention_backend(device, name)`` is the one place that picks an implementation: the
Triton kernels (kernels/) on CUDA, the PyTorch backend on CPU (see engine.attention.selector).
"""

from engine.attention.backend import AttentionBackend, AttentionMetadata
from engine.attention.selector import get_attention_backend

__all__ = ["AttentionBackend", "AttentionMetadata", "get_attention_backend"]
