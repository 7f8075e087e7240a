"""The projections LoRA may target and their sizes in a base model (reads config.json, no torch).

An adapter's A matrix of module ``m`` is [rank, in_features(m)] and its B matrix
[out_features(m), rank]; these sizes come from the base model's config alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# PEFT module name -> the Hugging Face submodule holding it inside a decoder layer.
MODULE_PARENTS = {
    "q_proj": "self_attn",
    "k_proj": "self_attn",
    "v_proj": "self_attn",
    "o_proj": "self_attn",
    "gate_proj": "mlp",
    "up_proj": "mlp",
    "down_proj": "mlp",
}
SUPPORTED_MODULES = tuple(MODULE_PARENTS)

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
)


@dataclass(frozen=True, slots=True)
class BaseModelShape:
    """What an adapter must agree with: architecture, layer count and projection sizes."""

    architecture: str
    num_hidden_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int

    @classmethod
    def from_pretrained(cls, path: str | Path) -> BaseModelShape:
        """Read a Hugging Face checkpoint's config.json; ValueError if it cannot take LoRA."""
        config_file = Path(path).expanduser() / "config.json"
        if not config_file.is_file():
            raise ValueError(f"base model {path} has no config.json")
        try:
            config = json.loads(config_file.read_text())
        except ValueError as exc:
            raise ValueError(f"base model config.json is not valid JSON: {exc}") from exc
        return cls.from_config(config)

    @classmethod
    def from_config(cls, config: dict) -> BaseModelShape:
        archs = config.get("architectures") or []
        arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if arch is None:
            raise ValueError(
                f"base model architecture {archs or 'unspecified'} does not take LoRA adapters "
                f"here; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        try:
            heads = int(config["num_attention_heads"])
            hidden = int(config["hidden_size"])
            return cls(
                architecture=arch,
                num_hidden_layers=int(config["num_hidden_layers"]),
                hidden_size=hidden,
                intermediate_size=int(config["intermediate_size"]),
                num_attention_heads=heads,
                num_key_value_heads=int(config.get("num_key_value_heads") or heads),
                head_dim=int(config.get("head_dim") or hidden // heads),
            )
        except KeyError as exc:
            raise ValueError(f"base model config.json lacks {exc.args[0]!r}") from exc

    def in_out(self, module: str) -> tuple[int, int]:
        """(in_features, out_features) of ``module`` (one of SUPPORTED_MODULES)."""
        q_size = self.num_attention_heads * self.head_dim
        kv_size = self.num_key_value_heads * self.head_dim
        sizes = {
            "q_proj": (self.hidden_size, q_size),
            "k_proj": (self.hidden_size, kv_size),
            "v_proj": (self.hidden_size, kv_size),
            "o_proj": (q_size, self.hidden_size),
            "gate_proj": (self.hidden_size, self.intermediate_size),
            "up_proj": (self.hidden_size, self.intermediate_size),
            "down_proj": (self.intermediate_size, self.hidden_size),
        }
        if module not in sizes:
            raise ValueError(
                f"{module!r} is not a LoRA target; choose among {', '.join(SUPPORTED_MODULES)}"
            )
        return sizes[module]
