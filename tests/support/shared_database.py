"""A migrated file database and helpers to run manage.py and stand-in API processes on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.manage_server import run_manage
from tests.support.processes import end_input_and_wait

ROOT = Path(__file__).resolve().parents[2]


class FileDatabase:
    """A SQLite file every subprocess (commands, workers, Daphne) can share."""

    def __init__(self, path: Path, redis_url: str):
        self.path = path
        self.env = {
            **os.environ,
            "DATABASE_URL": f"sqlite:///{path}",
            "REDIS_URL": redis_url,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "PYTHONPATH": str(ROOT),
        }

    def manage(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_manage(self.env, *args, timeout=timeout)

    def migrate(self) -> FileDatabase:
        from tests.support.migrated_database import copy_migrated_database

        copy_migrated_database(self.path)
        return self

    def create_key(self, tenant: str, *extra: str) -> str:
        return self.manage("create_api_key", "--tenant", tenant, *extra).stdout.splitlines()[-1]


class ApiWorker:
    """One stand-in API process (tests/support/api_worker.py)."""

    def __init__(self, db: FileDatabase):
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("api_worker.py"))],
            cwd=ROOT,
            env=db.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def send(self, **cmd) -> None:
        self.process.stdin.write(json.dumps(cmd) + "\n")
        self.process.stdin.flush()

    def receive(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise AssertionError(f"worker exited with {self.process.wait()}")
        return json.loads(line)

    def call(self, **cmd) -> dict:
        self.send(**cmd)
        return self.receive()

    def close(self) -> None:
        end_input_and_wait(self.process)
