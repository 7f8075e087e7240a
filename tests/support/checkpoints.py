"""Session cache of tiny random-weight checkpoints made by engine.demo.checkpoint."""

from __future__ import annotations

import threading
from pathlib import Path

from engine.demo.checkpoint import make_checkpoint


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
