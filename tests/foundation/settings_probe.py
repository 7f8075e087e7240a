"""Settings as a freshly started process sees them, for tests of what settings read at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from controlplane.launcher.process_commands import REPO


def settings_of_a_new_process(var_dir: Path, *names: str, unset=(), **env: str) -> list[str]:
    """The settings ``names`` (their str) in a new process with PLATFORM_VAR_DIR=``var_dir``,
    the variables in ``unset`` removed and ``env`` added to this process's environment."""
    base = {k: v for k, v in os.environ.items() if k not in set(unset)}
    code = (
        "import django; django.setup(); from django.conf import settings; "
        f"print(*(getattr(settings, name) for name in {list(names)!r}), sep='\\n')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={
            **base,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "PLATFORM_VAR_DIR": str(var_dir),
            **env,
        },
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()
