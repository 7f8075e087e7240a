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
import gc, sys
import controlplane.asgi  # what Daphne imports before it serves
frozen, left = gc.get_freeze_count(), len(gc.get_objects(generation=2))
from django.urls import resolve
loaded = set(sys.modules)
for path in ("/v1/chat/completions", "/v1/models", "/admin/", "/portal/"):
    resolve(path)  # what the first requests would import, were the URLconf not loaded yet
print(frozen, left, len(set(sys.modules) - loaded))
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
    frozen, left, imported_later = map(int, done.stdout.split())
    assert frozen > 50_000 and left < 1_000
    # Every view module is loaded, and frozen, before the first request: imported by it, the
    # URLconf's ~350 modules kept ~20,000 objects in what each full collection walks.
    assert imported_later == 0
