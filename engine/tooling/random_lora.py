"""Random PEFT LoRA adapters for a base checkpoint: for tests, the demo and benchmarks.

The files are what PEFT's ``save_pretrained`` writes (``adapter_config.json`` and
``adapter_model.safetensors`` with PEFT's key names), so PEFT itself loads them; the tests
check that. B is random too (PEFT initialises it to zero), so the adapter visibly changes the
model's output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

from engine.lora.shapes import MODULE_PARENTS, SUPPORTED_MODULES, BaseModelShape
from engine.lora.validation import CONFIG_FILE, WEIGHTS_FILE


def make_random_adapter(
    base_path: str | Path,
    out_path: str | Path,
    *,
    rank: int = 8,
    targets: Sequence[str] = SUPPORTED_MODULES,
    seed: int = 0,
    zero_b: bool = False,
    lora_alpha: float | None = None,
    use_rslora: bool = False,
    b_std: float = 0.05,
) -> Path:
    """Write a random rank-``rank`` adapter for the checkpoint at ``base_path``; return its dir.

    Deterministic in ``seed``. ``lora_alpha`` defaults to 2 * rank (scaling 2).
    """
    base = BaseModelShape.from_pretrained(base_path)
    unknown = sorted(set(targets) - set(SUPPORTED_MODULES))
    if unknown:
        raise ValueError(f"unknown target modules {unknown}; choose among {SUPPORTED_MODULES}")
    if rank < 1:
        raise ValueError(f"rank must be positive, got {rank}")
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(base.num_hidden_layers):
        for module in (m for m in SUPPORTED_MODULES if m in targets):
            in_features, out_features = base.in_out(module)
            prefix = f"base_model.model.model.layers.{layer}.{MODULE_PARENTS[module]}.{module}"
            a = torch.randn(rank, in_features, generator=generator) / math.sqrt(in_features)
            b = torch.randn(out_features, rank, generator=generator) * b_std
            tensors[f"{prefix}.lora_A.weight"] = a.contiguous()
            tensors[f"{prefix}.lora_B.weight"] = (torch.zeros_like(b) if zero_b else b).contiguous()
    out = Path(out_path)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(base_path),
        "r": rank,
        "lora_alpha": lora_alpha if lora_alpha is not None else 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": [m for m in SUPPORTED_MODULES if m in targets],
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "use_rslora": use_rslora,
        "modules_to_save": None,
    }
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    return out
