"""Reference rotary position embedding (neox / HF ``rotate_half`` style) and its cos/sin cache.

The cache is built once per model from the checkpoint's RoPE settings, including Llama 3's
frequency scaling, and both the reference and the Triton kernel read it by position.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: Mapping[str, Any]) -> torch.Tensor:
    """Llama 3.1's scaling: slow long wavelengths by ``factor``, keep short ones, blend between."""
    try:
        factor = float(scaling["factor"])
        low_freq_factor = float(scaling["low_freq_factor"])
        high_freq_factor = float(scaling["high_freq_factor"])
        original_max = float(scaling["original_max_position_embeddings"])
    except KeyError as missing:
        raise ValueError(f"llama3 rope scaling needs {missing.args[0]!r}") from None
    if high_freq_factor <= low_freq_factor:
        raise ValueError("llama3 rope scaling needs high_freq_factor > low_freq_factor")
    low_freq_wavelen = original_max / low_freq_factor
    high_freq_wavelen = original_max / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, blended, scaled)


def rotary_cos_sin_cache(
    head_dim: int,
    max_position: int,
    base: float,
    scaling: Mapping[str, Any] | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """[max_position, head_dim] float32: cos of each frequency in the first half, sin in the second.

    ``scaling`` is the checkpoint's ``rope_scaling`` (or ``rope_parameters``) dict; types
    ``default`` (or None), ``linear`` and ``llama3`` are supported, anything else is a
    ValueError.
    """
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim must be a positive even number; got {head_dim}")
    if max_position <= 0:
        raise ValueError(f"max_position must be positive; got {max_position}")
    rope_type = "default"
    if scaling:
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    inv_freq = 1.0 / (base**exponents)
    if rope_type == "llama3":
        inv_freq = _llama3_inv_freq(inv_freq, scaling)
    elif rope_type == "linear":
        inv_freq = inv_freq / float(scaling["factor"])
    elif rope_type != "default":
        raise ValueError(
            f"unsupported rope scaling type {rope_type!r} (supported: default, linear, llama3)"
        )
    positions = torch.arange(max_position, dtype=torch.float32, device=device)
    freqs = torch.outer(positions, inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # transformers rounds cos and sin to the activations' dtype and rounds each product;
    # doing the same keeps bf16 greedy output equal to theirs for longer.
    half = x.shape[-1] // 2
    cos = cos.to(x.dtype)[:, None, :]
    sin = sin.to(x.dtype)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def apply_rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate query and key by each token's position; returns new tensors.

    positions:     [num_tokens] int
    query:         [num_tokens, num_heads, head_dim]
    key:           [num_tokens, num_kv_heads, head_dim]
    cos_sin_cache: [max_position, head_dim] float32, from ``rotary_cos_sin_cache``
    """
    half = cos_sin_cache.shape[-1] // 2
    rows = cos_sin_cache[positions.long()]
    cos, sin = rows[:, :half], rows[:, half:]
    return _rotate(query, cos, sin), _rotate(key, cos, sin)
