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
