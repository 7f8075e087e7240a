"""The optional parts an LLMEngine builds from its configuration: the LoRA adapter manager and
the speculative decoding proposer."""

from __future__ import annotations

import logging

import torch

from engine.config import EngineConfig
from engine.layers.quantized_linear import KERNEL_MAX_ROWS
from engine.lora.manager import LoraManager
from engine.lora.shapes import BaseModelShape
from engine.lora.slots import PACKED_MODULES
from engine.model_config import ModelConfig
from engine.spec_decode import Speculator

logger = logging.getLogger(__name__)


def build_speculator(
    config: EngineConfig, model_config: ModelConfig, device: torch.device
) -> Speculator | None:
    """The draft-free proposer (engine/spec_decode/), or None with speculation off."""
    if not config.enable_speculative_decoding:
        return None
    num_speculative_tokens = config.num_speculative_tokens
    if device.type == "cpu" and num_speculative_tokens >= KERNEL_MAX_ROWS:
        # Verification is exact while a step's decode rows take the CPU's row-invariant
        # kernels (engine/worker/step_inputs.py), that is up to KERNEL_MAX_ROWS rows.
        num_speculative_tokens = KERNEL_MAX_ROWS - 1
        logger.info("speculative decoding proposes at most %d tokens", num_speculative_tokens)
    return Speculator(
        num_speculative_tokens=num_speculative_tokens,
        max_num_seqs=config.speculative_max_num_seqs,
        max_model_len=model_config.max_model_len,
    )


def build_lora_manager(
    config: EngineConfig, device: torch.device, dtype: torch.dtype
) -> tuple[LoraManager | None, str]:
    """The adapter manager, or None and the reason when this model cannot take adapters."""
    if config.quantization is not None:
        # The LoRA hook adds deltas to float projections; quantized ones have no such path.
        return None, (
            f"LoRA adapters on a {config.quantization}-quantized base are not "
            "supported; serve the model without --quantization to use adapters"
        )
    try:
        base = BaseModelShape.from_pretrained(config.model)
    except ValueError as exc:
        return None, str(exc)
    manager = LoraManager(
        base,
        max_loras=config.max_loras,
        max_lora_rank=config.max_lora_rank,
        modules=PACKED_MODULES,  # the decoder fuses q|k|v and gate|up
        device=device,
        dtype=dtype,
    )
    return manager, ""
