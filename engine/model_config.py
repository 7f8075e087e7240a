"""ModelConfig: what the engine needs from a checkpoint's config.json and generation_config.json.

Reads both rope spellings: transformers 5 writes ``rope_parameters`` (theta inside), older
checkpoints write ``rope_theta`` plus ``rope_scaling``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

# architecture -> (model_type, q/k/v bias by default, q/k RMSNorm per head)
_ARCHS = {
    "LlamaForCausalLM": ("llama", False, False),
    "MistralForCausalLM": ("mistral", False, False),
    "Qwen2ForCausalLM": ("qwen2", True, False),
    "Qwen3ForCausalLM": ("qwen3", False, True),
}
_ROPE_TYPES = ("default", "llama3", "linear")


@dataclass(slots=True)
class ModelConfig:
    path: Path
    architecture: str
    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int
    max_model_len: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    checkpoint_dtype: str

    @property
    def eos_token_id(self) -> int | None:
        return self.eos_token_ids[0] if self.eos_token_ids else None

    @classmethod
    def from_pretrained(cls, path: str | Path, max_model_len: int | None = None) -> ModelConfig:
        path = Path(path).expanduser()
        config_file = path / "config.json"
        if not config_file.is_file():
            raise ValueError(f"model path {path} has no config.json")
        cfg = json.loads(config_file.read_text())
        arch = next((a for a in cfg.get("architectures") or [] if a in _ARCHS), None)
        if arch is None:
            raise ValueError(
                f"architecture {cfg.get('architectures')} is not supported; supported: "
                + ", ".join(sorted(_ARCHS))
            )
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act {cfg['hidden_act']!r} is not supported (only silu)")
        model_type, qkv_bias_default, qk_norm = _ARCHS[arch]
        num_heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // num_heads
        rope_theta, rope_scaling = _read_rope(cfg)
        max_pos = int(cfg.get("max_position_embeddings") or 2048)
        derived_len = max_pos
        window = cfg.get("sliding_window")
        uses_window = window and cfg.get("use_sliding_window", model_type == "mistral")
        if uses_window and window < derived_len:
            # Sliding-window attention is not implemented; within the window it is plain
            # causal attention, so capping the length keeps outputs exact.
            logger.warning("capping max_model_len to the sliding window (%d)", window)
            derived_len = int(window)
        if max_model_len is None:
            max_model_len = derived_len
        elif max_model_len > derived_len:
            raise ValueError(
                f"max_model_len ({max_model_len}) is larger than the model supports ({derived_len})"
            )
        attention_bias = bool(cfg.get("attention_bias", False))
        return cls(
            path=path,
            architecture=arch,
            model_type=model_type,
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=int(cfg["hidden_size"]),
            num_hidden_layers=int(cfg["num_hidden_layers"]),
            num_attention_heads=int(num_heads),
            num_key_value_heads=int(cfg.get("num_key_value_heads") or num_heads),
            head_dim=int(head_dim),
            intermediate_size=int(cfg["intermediate_size"]),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=max_pos,
            max_model_len=max_model_len,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias_default or attention_bias,
            o_bias=attention_bias,
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            qk_norm=qk_norm,
            eos_token_ids=_read_eos(path, cfg),
            bos_token_id=cfg.get("bos_token_id"),
            checkpoint_dtype=str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32"),
        )


def _read_rope(cfg: dict) -> tuple[float, dict | None]:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = float(params.get("rope_theta") or cfg.get("rope_theta") or 10000.0)
    rope_type = params.get("rope_type") or params.get("type") or "default"
    if rope_type not in _ROPE_TYPES:
        raise ValueError(f"rope type {rope_type!r} is not supported; supported: {_ROPE_TYPES}")
    if rope_type == "default":
        return theta, None
    return theta, {**params, "rope_type": rope_type}


def _read_eos(path: Path, cfg: dict) -> tuple[int, ...]:
    """EOS ids from generation_config.json (what ``generate`` stops on), else config.json."""
    eos = None
    gen_file = path / "generation_config.json"
    if gen_file.is_file():
        eos = json.loads(gen_file.read_text()).get("eos_token_id")
    if eos is None:
        eos = cfg.get("eos_token_id")
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, list) else (int(eos),)
