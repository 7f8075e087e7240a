"""Random-weight Hugging Face checkpoints for tests, benchmarks and the demo.

No weights can be downloaded where this project is built, so it makes its own: a real
``config.json`` + ``model.safetensors`` + tokenizer + chat template for each supported
architecture, written by transformers itself so that ``AutoModelForCausalLM.from_pretrained``
loads them offline. The weights are random: the text they produce is noise, which the
checkpoint's README and its served name ("demo-random-...") say plainly.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

ARCHITECTURES = ("llama", "llama3", "mistral", "qwen2", "qwen3")


@dataclass(frozen=True, slots=True)
class ModelShape:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int


SHAPES: dict[str, ModelShape] = {
    # Tests: milliseconds a step on one CPU core.
    "tiny": ModelShape(64, 2, 4, 2, 128, 1024, 2048),
    # Demo and CPU benchmarks: about 20M parameters.
    "small": ModelShape(512, 6, 8, 4, 1536, 1024, 4096),
}


def _config(arch: str, shape: ModelShape, tokenizer, dtype: str):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    common = dict(
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        intermediate_size=shape.intermediate_size,
        vocab_size=shape.vocab_size,
        max_position_embeddings=shape.max_position_embeddings,
        rms_norm_eps=1e-6,
        # Larger than the usual 0.02 so that logits have clear winners: greedy parity
        # tests then compare decisions, not float noise between near-ties.
        initializer_range=0.08,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype=dtype,
    )
    if arch == "llama":
        return LlamaConfig(**common, rope_theta=10000.0)
    if arch == "llama3":
        return LlamaConfig(
            **common,
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 256,
            },
        )
    if arch == "mistral":
        return MistralConfig(**common, rope_theta=10000.0, sliding_window=None)
    if arch == "qwen2":
        return Qwen2Config(**common, rope_theta=10000.0, use_sliding_window=False)
    if arch == "qwen3":
        return Qwen3Config(
            **common,
            head_dim=shape.hidden_size // shape.num_attention_heads,
            rope_theta=10000.0,
            use_sliding_window=False,
        )
    raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")


def make_checkpoint(
    path: str | Path,
    *,
    arch: str = "llama",
    size: str = "tiny",
    seed: int = 0,
    dtype: str = "float32",
) -> Path:
    """Write a random-weight checkpoint of ``arch`` and ``size`` to ``path`` and return it.

    Deterministic: the same arguments give byte-identical weights and tokenizer.
    """
    import torch
    from transformers import AutoModelForCausalLM

    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    if size not in SHAPES:
        raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SHAPES)}")
    from engine.tooling.demo.tokenizer import train_tokenizer

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    shape = SHAPES[size]
    tokenizer = train_tokenizer(vocab_size=shape.vocab_size)
    shape = ModelShape(**{**asdict(shape), "vocab_size": len(tokenizer)})
    config = _config(arch, shape, tokenizer, dtype)

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    with torch.no_grad():
        # Random norms too, so that a norm applied in the wrong place shows up in parity tests.
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # callers (the serve command) show their own progress
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    params = sum(p.numel() for p in model.parameters())
    (path / "README.md").write_text(
        f"# Random-weight {arch} checkpoint ({size}, {params / 1e6:.1f}M parameters)\n\n"
        "Made by `python manage.py make_demo_model`. The weights are random: the model\n"
        "produces noise, not language. It exists to exercise the platform end to end.\n"
    )
    (path / "demo_model.json").write_text(
        json.dumps({"arch": arch, "size": size, "seed": seed, "parameters": params}, indent=2)
    )
    return path
