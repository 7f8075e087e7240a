"""CPU decode steps in one native call for all decoder layers (kernels/cpu/decode_layers.cpp).

A decode token of a small model on a CPU is 25 to 35 PyTorch calls a layer, each costing a few
microseconds of Python and dispatch: 1.4 ms of SmolLM2-135M's 5.4 ms int4 forward (30 layers,
2-core EPYC; docs/benchmarks.md).
``FusedDecode`` lays out every layer's weights once, at load, as the flat list the native op
reads, so a decode-only step is one call for the whole layer stack, whatever the weights'
form (float32, bfloat16 plain or oneDNN-packed, int8, int4). The op runs the same native
kernels the per-op path does, in the same order, so its output is bit-identical to it.

It serves steps that are decodes only (one query token per sequence) with no LoRA adapter, on
a CPU, with the PyTorch attention backend (the CPU's) and the native kernels built; every other
step takes the per-op path. ``PLATFORM_FUSED_DECODE=0`` turns it off (read when a model loads).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

from engine.attention.backend import AttentionMetadata
from engine.attention.torch_backend import TorchAttentionBackend
from engine.layers.dispatch import CPU_OP_DTYPES, cpu_ops
from engine.layers.packed_linear import PackedWeight
from engine.layers.quantized_linear import KERNEL_MAX_ROWS, Int4Weight, Int8Weight
from kernels.cpu import native_ops

if TYPE_CHECKING:
    from engine.models.decoder import DecoderLM, LayerWeights, Weight

ENV_SWITCH = "PLATFORM_FUSED_DECODE"

# The op's codes for a projection's weight form (kernels/cpu/decode_layers.cpp: kFloat...).
FLOAT, PACKED, INT8, INT4, INT4_ROWS8 = 0, 1, 2, 3, 4
# Bits of a layer's fifth layout int: which optional tensors follow in its weight list.
QKV_BIAS, QK_NORM, O_BIAS, GATE_UP_BIAS, DOWN_BIAS = 1, 2, 4, 8, 16


def fused_decode_enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0"


def _weight(weight: Weight) -> tuple[int, list[torch.Tensor]]:
    if isinstance(weight, torch.Tensor):
        return FLOAT, [weight]
    if isinstance(weight, PackedWeight):
        return PACKED, [weight.packed]
    if isinstance(weight, Int8Weight):
        return INT8, [weight.qweight, weight.scales]
    if isinstance(weight, Int4Weight):
        kind = {1: INT4, 8: INT4_ROWS8}[weight.interleave]
        return kind, [weight.packed, weight.scales, weight.mins]
    raise TypeError(f"no fused decode for weights of type {type(weight).__name__}")


def layer_arguments(layer: LayerWeights) -> tuple[list[int], list[torch.Tensor]]:
    """One layer's five layout ints and its tensors, in the order the op reads them."""
    kinds: list[int] = []
    tensors: list[torch.Tensor] = [layer.input_norm]
    flags = 0

    def projection(weight: Weight, bias: torch.Tensor | None, bit: int) -> None:
        nonlocal flags
        kind, parts = _weight(weight)
        kinds.append(kind)
        tensors.extend(parts)
        if bias is not None:
            tensors.append(bias)
            flags |= bit

    projection(layer.qkv, layer.qkv_bias, QKV_BIAS)
    if layer.q_norm is not None:
        tensors.extend((layer.q_norm, layer.k_norm))
        flags |= QK_NORM
    projection(layer.o_proj, layer.o_bias, O_BIAS)
    tensors.append(layer.post_norm)
    projection(layer.gate_up, layer.gate_up_bias, GATE_UP_BIAS)
    projection(layer.down, layer.down_bias, DOWN_BIAS)
    return [*kinds, flags], tensors


class FusedDecode:
    """A model's decoder layers as one native call for decode-only steps."""

    def __init__(self, model: DecoderLM) -> None:
        self.model = model
        self.layout: list[int] = []
        self.weights: list[torch.Tensor] = []
        for layer in model.layers:
            ints, tensors = layer_arguments(layer)
            self.layout.extend(ints)
            self.weights.extend(tensors)
        # The caches, weights and layout in one native object (decode_stack), made at the first
        # step and again if the runner hands over other caches.
        self._stack = None
        self._stack_caches: list | None = None

    @classmethod
    def build(cls, model: DecoderLM) -> FusedDecode | None:
        """The fused path for ``model``, or None where it cannot serve (see the module doc)."""
        if (
            not fused_decode_enabled()
            or model.device.type != "cpu"
            or model.dtype not in CPU_OP_DTYPES
            or not isinstance(model.backend, TorchAttentionBackend)
            or native_ops() is None
        ):
            return None
        return cls(model)

    def can_run(self, hidden: torch.Tensor, metadata: AttentionMetadata) -> bool:
        """True for a decode-only step whose tensors the native ops take (the caller checks
        LoRA). cpu_ops also answers None when tests route the CPU to Triton's interpreter."""
        return (
            metadata.num_decodes == metadata.num_seqs == hidden.shape[0]
            and cpu_ops(hidden) is not None
        )

    def __call__(
        self,
        hidden: torch.Tensor,  # [num_seqs, hidden] embedded tokens
        positions: torch.Tensor,  # [num_seqs]
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        metadata: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, residual) after the last layer, as the per-op loop leaves them."""
        m = self.model
        if self._stack_caches is not kv_caches:
            caches = [cache for pair in kv_caches for cache in pair]
            self._stack = torch.classes.platform_cpu.DecodeStack(caches, self.weights, self.layout)
            self._stack_caches = kv_caches
        return native_ops().decode_stack(
            hidden,
            None,
            positions,
            metadata.slot_mapping,
            metadata.block_tables,
            metadata.seq_lens,
            self._stack,
            m.rotary.cos,
            m.rotary.sin,
            m.num_heads,
            m.num_kv_heads,
            m.head_dim,
            m.eps,
            m.scale,
            KERNEL_MAX_ROWS,
        )
