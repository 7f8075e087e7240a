"""API processes never load torch: not through the views, the consumer or the ASGI app."""

from __future__ import annotations

import subprocess
import sys

from tests.support.processes import REPO

CHECK = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
import controlplane.asgi
import inference.views.generation, inference.views.embeddings, inference.consumers
import inference.transport.engine_client, inference.transport.embeddings_client, engine.pooling.messages
from django.urls import resolve
resolve("/v1/chat/completions")
heavy = sorted(m for m in ("torch", "transformers", "triton") if m in sys.modules)
print(",".join(heavy) or "clean")
"""


def test_api_imports_leave_torch_out():
    out = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "clean", out.stderr
