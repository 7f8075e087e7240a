"""Run a command with DATABASE_URL pointing at a private PostgreSQL started for it.

``python -m tests.support.with_postgres -m pytest -m django_db`` runs the suite's database
tests on PostgreSQL: bin/test does this after the main (SQLite) run.
"""

from __future__ import annotations

import os
import subprocess
import sys

from controlplane.launcher.postgres_server import PostgresServer


def main(argv: list[str]) -> int:
    with PostgresServer() as server:
        print(f"PostgreSQL for the tests at {server.url}", flush=True)
        env = {**os.environ, "DATABASE_URL": server.url}
        return subprocess.call([sys.executable, *argv], env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
