"""A build of the CPU kernels killed half way leaves torch's lock behind; the next start must
not wait on it for ever."""

from __future__ import annotations

import os
import time
from pathlib import Path

from torch.utils import cpp_extension

from kernels.cpu import STALE_LOCK_S, _clear_stale_build_lock


def _lock(tmp_path, monkeypatch, age_s: float) -> Path:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    lock = Path(cpp_extension._get_build_directory("platform_cpu_test", verbose=False)) / "lock"
    lock.touch()
    then = time.time() - age_s
    os.utime(lock, (then, then))
    return lock


def test_a_lock_older_than_any_build_is_removed(tmp_path, monkeypatch):
    lock = _lock(tmp_path, monkeypatch, STALE_LOCK_S + 60)
    _clear_stale_build_lock(cpp_extension, "platform_cpu_test")
    assert not lock.exists()


def test_the_lock_of_a_build_under_way_is_kept(tmp_path, monkeypatch):
    lock = _lock(tmp_path, monkeypatch, 30)
    _clear_stale_build_lock(cpp_extension, "platform_cpu_test")
    assert lock.exists()
