"""The node agent stays light: its command imports neither torch nor the engine's runtime."""

from __future__ import annotations

import subprocess
import sys

from controlplane.launcher.process_commands import REPO, platform_environment

CHECK = """
import sys, django
django.setup()
import controlplane.launcher.management.commands.run_agent
import controlplane.fleet.management.commands.deploy
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))
print(heavy)
"""


def test_the_agent_and_fleet_commands_never_import_torch(redis_server):
    env = platform_environment(redis_url=redis_server.url)
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
