"""Rotary position embedding with cos/sin tables computed once for every position.

Follows Hugging Face's convention (rotate_half: the two halves of the head dimension form the
pairs), including Llama 3's frequency scaling, so outputs match transformers bit for bit.
On CUDA the Triton kernel (kernels.apply_rotary_embedding) rotates q and k in one launch from a
float32 cos|sin table; it rounds cos, sin and each product to the model dtype as this code does.
On a CPU in float32 or bfloat16 the native op (kernels/cpu/layer_ops.cpp) rotates both from
the same cos and sin tables this code reads, bit for bit.
"""

from __future__ import annotations

import math

import torch

from engine.layers import dispatch


def inverse_frequencies(head_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    if scaling is None:
        return inv_freq
    if scaling["rope_type"] == "linear":
        return inv_freq / float(scaling["factor"])
    # llama3: leave high frequencies, divide low ones by ``factor``, blend in between.
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling["low_freq_factor"])
    high_freq_factor = float(scaling["high_freq_factor"])
    old_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_len / low_freq_factor
    high_freq_wavelen = old_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding:
    def __init__(
        self,
        head_dim: int,
        theta: float,
        scaling: dict | None,
        max_position: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        inv_freq = inverse_frequencies(head_dim, theta, scaling)
        positions = torch.arange(max_position, dtype=torch.float)
        freqs = positions[:, None] * inv_freq[None, :]  # [max_position, head_dim // 2]
        # Both halves use the same angles (HF concatenates freqs with itself).
        self.cos = freqs.cos().to(dtype=dtype, device=device).contiguous()
        self.sin = freqs.sin().to(dtype=dtype, device=device).contiguous()
        # [max_position, head_dim] float32, cos half then sin half: the kernel's table.
        self.cos_sin_cache = (
            torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(device)
            if device.type in dispatch.KERNEL_DEVICE_TYPES
            else None
        )

    def __call__(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """query [T, num_heads, head_dim], key [T, num_kv_heads, head_dim] -> rotated copies."""
        if self.cos_sin_cache is not None and dispatch.use_kernels(query):
            return dispatch.kernel_ops().apply_rotary_embedding(
                positions, query, key, self.cos_sin_cache
            )
        ops = dispatch.cpu_ops(query)
        if ops is not None and self.cos.dtype == query.dtype == key.dtype:
            return ops.rotary_embedding(positions, query, key, self.cos, self.sin)
        cos = self.cos[positions].unsqueeze(1)  # [T, 1, head_dim // 2]
        sin = self.sin[positions].unsqueeze(1)
        return _rotate(query, cos, sin), _rotate(key, cos, sin)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Same arithmetic as HF's x * cos + rotate_half(x) * sin, written per half:
    # a + (-b) == a - b exactly in IEEE floats, so results stay bit-identical.
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
