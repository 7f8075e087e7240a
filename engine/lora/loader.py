"""Load a PEFT LoRA adapter's weights into host memory, after validating it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from engine.lora.shapes import BaseModelShape
from engine.lora.validation import WEIGHTS_FILE, AdapterError, AdapterSpec, inspect_adapter


@dataclass(slots=True)
class LoraAdapter:
    """A loaded adapter: its spec and, per (layer, module), A [rank, in] and B [out, rank]."""

    name: str
    spec: AdapterSpec
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]

    @property
    def rank(self) -> int:
        return self.spec.rank

    @property
    def scaling(self) -> float:
        return self.spec.scaling

    @property
    def checksum(self) -> str:
        return self.spec.checksum

    @property
    def num_bytes(self) -> int:
        return sum(a.nbytes + b.nbytes for a, b in self.weights.values())


def load_adapter(
    path: str | Path,
    base: BaseModelShape,
    *,
    name: str | None = None,
    max_lora_rank: int = 64,
    dtype: torch.dtype = torch.float32,
    expected_checksum: str | None = None,
) -> LoraAdapter:
    """Validate and load the adapter at ``path``; AdapterError says what is wrong.

    ``expected_checksum`` (the one the control plane recorded) guards against files that
    changed on disk after validation: serving them would break the prefix-cache identity.
    """
    spec = inspect_adapter(path, base, max_lora_rank=max_lora_rank)
    if expected_checksum and spec.checksum != expected_checksum:
        raise AdapterError(
            f"adapter files at {spec.path} changed since they were registered "
            f"(checksum {spec.checksum[:12]}, expected {expected_checksum[:12]})"
        )
    weights = {}
    with safe_open(spec.path / WEIGHTS_FILE, framework="pt", device="cpu") as fh:
        for target, (key_a, key_b) in spec.weight_keys.items():
            weights[target] = (
                fh.get_tensor(key_a).to(dtype).contiguous(),
                fh.get_tensor(key_b).to(dtype).contiguous(),
            )
    return LoraAdapter(name=name or spec.path.name, spec=spec, weights=weights)
