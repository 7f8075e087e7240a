"""LoRARequest: how the offline API names an adapter, shaped like vLLM's.

``LLM.generate(prompts, params, lora_request=LoRARequest("sql", 1, "/adapters/sql"))`` loads the
adapter on first use and runs the prompts with it. ``lora_int_id`` is kept for vLLM
compatibility (it must be positive); the engine itself keys adapters by name and checksum.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str

    def __post_init__(self) -> None:
        if not isinstance(self.lora_name, str) or not self.lora_name:
            raise ValueError("lora_name must be a non-empty string")
        if isinstance(self.lora_int_id, bool) or not isinstance(self.lora_int_id, int):
            raise ValueError(f"lora_int_id must be an integer, got {self.lora_int_id!r}")
        if self.lora_int_id < 1:
            raise ValueError(f"lora_int_id must be positive, got {self.lora_int_id}")
        if not self.lora_path:
            raise ValueError("lora_path must name the adapter's directory")
