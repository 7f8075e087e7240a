"""Load a checkpoint's safetensors into a DecoderLM without building a transformers model."""

from __future__ import annotations

import logging

import torch
from safetensors import safe_open

from engine.attention.backend import AttentionBackend
from engine.model_config import ModelConfig
from engine.models.decoder import DecoderLM
from engine.models.quantize import check_quantization, pack_model, quantize_model

logger = logging.getLogger(__name__)


def read_weights(config: ModelConfig) -> dict[str, torch.Tensor]:
    files = sorted(config.path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{config.path} has no .safetensors weights")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open is not a mapping
                weights[name] = fh.get_tensor(name)
    return weights


def load_model(
    config: ModelConfig,
    *,
    dtype: torch.dtype,
    device: torch.device,
    backend: AttentionBackend,
    quantization: str | None = None,
) -> DecoderLM:
    """The model in ``dtype`` on ``device``; ``quantization`` ("int8", "int4") stores the
    projection weights weight-only quantized (engine.models.quantize)."""
    check_quantization(quantization, device)
    weights = read_weights(config)
    model = DecoderLM(config, weights, dtype=dtype, device=device, backend=backend)
    del weights  # the float copies go as each projection is quantized
    if quantization is not None:
        quantize_model(model, quantization)
    else:
        pack_model(model)
    logger.info(
        "loaded %s (%s, %d layers) on %s as %s%s",
        config.path,
        config.architecture,
        config.num_hidden_layers,
        device,
        dtype,
        f", weights {quantization}" if quantization else "",
    )
    return model
