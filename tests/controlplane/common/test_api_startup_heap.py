"""The API's ASGI process exempts what start-up loaded from full garbage collections: those
walked ~140,000 Django, DRF and Twisted objects, 100-150 ms each, during which no request
moved (engine/startup_heap.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import gc
import controlplane.asgi  # what Daphne imports before it serves
print(gc.get_freeze_count(), len(gc.get_objects(generation=2)))
"""


def test_the_asgi_application_freezes_its_start_up_heap():
    # In a process of its own: freezing the test process would change what it collects.
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    frozen, left = map(int, done.stdout.split())
    assert frozen > 50_000 and left < 1_000
