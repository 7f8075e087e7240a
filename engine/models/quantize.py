"""Weight-only quantization of a loaded DecoderLM (``EngineConfig.quantization``), and the
oneDNN packing of unquantized bfloat16 projections on CPUs with bfloat16 kernels.

The four projections of every layer take the chosen method; the LM head (the largest single
matrix of a small model, 49152 x 576 in SmolLM2-135M) is always int8, as llama.cpp's 4-bit
files keep their output matrix at 6 to 8 bits (the demo Q4_1 file: Q8_0): logits are
sensitive, and int8 already reads a quarter of the fp32 bytes. The embedding table stays float: a lookup reads one row per token.
Norms, biases and the KV cache keep the engine's dtype.
"""

from __future__ import annotations

import logging

import torch

from engine.layers.packed_linear import can_pack, pack
from engine.layers.quantized_linear import QUANTIZATION_METHODS, quantize, weight_bytes
from engine.models.decoder import DecoderLM

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


def quantize_model(model: DecoderLM, method: str) -> None:
    """Replace the model's projection weights by their quantized form, in place."""
    before = _projection_bytes(model)
    for layer in model.layers:
        for name in _PROJECTIONS:
            setattr(layer, name, quantize(getattr(layer, name), method))
    model.lm_head = quantize(model.lm_head, "int8")
    logger.info(
        "quantized the projections to %s and the LM head to int8: %.0f MiB -> %.0f MiB",
        method,
        before / 2**20,
        _projection_bytes(model) / 2**20,
    )


def pack_model(model: DecoderLM) -> bool:
    """Pack the projections and the LM head for oneDNN where that helps (engine.layers.
    packed_linear); False, leaving the model as it was, where it does not. A tied LM head is
    packed as a copy: the embedding lookup keeps reading the plain table."""
    if not can_pack(model.dtype, model.device):
        return False
    for layer in model.layers:
        for name in _PROJECTIONS:
            setattr(layer, name, pack(getattr(layer, name)))
    model.lm_head = pack(model.lm_head)
    logger.info("packed the bfloat16 projections and LM head for oneDNN")
    return True


def _projection_bytes(model: DecoderLM) -> int:
    total = weight_bytes(model.lm_head)
    for layer in model.layers:
        total += sum(weight_bytes(getattr(layer, name)) for name in _PROJECTIONS)
    return total
