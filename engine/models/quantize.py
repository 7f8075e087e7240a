"""Weight-only quantization of a DecoderLM's weights as they load (``EngineConfig.quantization``),
and the oneDNN packing of unquantized bfloat16 projections on CPUs with bfloat16 kernels.

The four projections of every layer take the chosen method; the LM head (the largest single
matrix of a small model, 49152 x 576 in SmolLM2-135M) is always int8, as llama.cpp's 4-bit
files keep their output matrix at 6 to 8 bits (the demo Q4_1 file: Q8_0): logits are
sensitive, and int8 already reads a quarter of the fp32 bytes. The embedding table stays float: a lookup reads one row per token.
Norms, biases and the KV cache keep the engine's dtype.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import torch

from engine.layers.packed_linear import can_pack, pack
from engine.layers.quantized_linear import QUANTIZATION_METHODS, quantize, weight_bytes
from engine.models.decoder import DecoderLM, Weight

logger = logging.getLogger(__name__)

_PROJECTIONS = ("qkv", "o_proj", "gate_up", "down")


def check_quantization(method: str | None, device: torch.device) -> None:
    """ValueError with the reason when ``method`` cannot run on ``device``."""
    if method is None:
        return
    if method not in QUANTIZATION_METHODS:
        raise ValueError(
            f"quantization must be one of {', '.join(QUANTIZATION_METHODS)}, got {method!r}"
        )
    if device.type != "cpu":
        raise ValueError(
            f"{method} quantization runs on torch's CPU kernels only; serve unquantized on "
            f"{device.type}"
        )


# What a layer's projection or the LM head becomes as the checkpoint is read: called with
# ("projection" | "lm_head", the float weight), it returns the weight the model keeps.
WeightTransform = Callable[[str, torch.Tensor], Weight]


def load_transform(
    method: str | None, dtype: torch.dtype, device: torch.device
) -> WeightTransform | None:
    """How the loader turns each projection and the LM head into what the model keeps: the
    quantized form (``method`` "int8"/"int4"; the LM head always int8), or the oneDNN-packed
    one (unquantized bfloat16 on CPUs with bfloat16 kernels); None keeps the float weights.

    Applied to each weight as the loader builds it, so the float copy of the whole model never
    exists at once: a checkpoint's peak memory is one layer's floats over the kept weights.
    """
    if method is not None:
        return lambda kind, weight: quantize(weight, method if kind == "projection" else "int8")
    if can_pack(dtype, device):
        # A tied LM head is packed as a copy: the embedding lookup keeps the plain table.
        return lambda kind, weight: pack(weight)
    return None


def log_weights(model: DecoderLM, method: str | None) -> None:
    if method is not None:
        logger.info(
            "quantized the projections to %s and the LM head to int8 while loading: %.0f MiB",
            method,
            _projection_bytes(model) / 2**20,
        )


def _projection_bytes(model: DecoderLM) -> int:
    total = weight_bytes(model.lm_head)
    for layer in model.layers:
        total += sum(weight_bytes(getattr(layer, name)) for name in _PROJECTIONS)
    return total


def decode_read_bytes(model: DecoderLM) -> int:
    """Bytes of weights one decode step reads, however stored: every tensor of every layer,
    the final norm and the LM head. The embedding table is left out (a lookup reads one row
    per token). The memory-bandwidth roofline of a decode divides by this
    (bench/cpu_vs_llamacpp.py)."""
    total = weight_bytes(model.norm) + weight_bytes(model.lm_head)
    for layer in model.layers:
        for field in dataclasses.fields(layer):
            weight = getattr(layer, field.name)
            if weight is not None:
                total += weight_bytes(weight)
    return total
