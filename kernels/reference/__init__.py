"""PyTorch references for every kernel, with the Triton versions' exact signatures.

They run on any device and define what the kernels must compute; the engine uses them on CPU.
"""

from kernels.reference.activation import silu_and_mul
from kernels.reference.attention import paged_decode_attention, paged_prefill_attention
from kernels.reference.cache import reshape_and_cache
from kernels.reference.lora import LoRASegments, lora_expand, lora_segments, lora_shrink
from kernels.reference.norm import fused_add_rms_norm, rms_norm
from kernels.reference.rotary import apply_rotary_embedding, rotary_cos_sin_cache

__all__ = [
    "LoRASegments",
    "apply_rotary_embedding",
    "fused_add_rms_norm",
    "lora_expand",
    "lora_segments",
    "lora_shrink",
    "paged_decode_attention",
    "paged_prefill_attention",
    "reshape_and_cache",
    "rms_norm",
    "rotary_cos_sin_cache",
    "silu_and_mul",
]
