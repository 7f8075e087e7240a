"""An engine process exempts what start-up loaded from the garbage collector's full passes:
those passes walked every torch and transformers object, a step's stall at random moments
(engine/startup_heap.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc
import torch, transformers  # what an engine process has loaded before it serves
from engine.startup_heap import freeze_startup_heap
before = len(gc.get_objects(generation=2))
frozen = freeze_startup_heap()
print(before, frozen, len(gc.get_objects(generation=2)))
"""


def test_a_full_collection_no_longer_walks_what_start_up_loaded():
    # In a process of its own: freezing the test process would change what it collects.
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    before, frozen, after = map(int, done.stdout.split())
    assert before > 10_000  # torch alone leaves tens of thousands of objects there
    assert frozen >= before and after < 100
