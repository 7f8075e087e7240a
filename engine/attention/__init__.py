"""Attention over the paged KV cache, behind a backend interface.

``get_attention_backend(device)`` is the one place that picks an implementation: the PyTorch
backend everywhere today; a Triton backend (kernels/) slots in here for CUDA.
"""

from engine.attention.backend import AttentionBackend, AttentionMetadata
from engine.attention.selector import get_attention_backend

__all__ = ["AttentionBackend", "AttentionMetadata", "get_attention_backend"]
