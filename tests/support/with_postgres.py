"""Run a command with DATABASE_URL pointing at a private PostgreSQL started for it.

``python -m tests.support.with_postgres -m pytest -m django_db`` runs the suite's database
tests on PostgreSQL: bin/test does this beside the main (SQLite) run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from controlplane.launcher.postgres_server import PostgresServer


def _stop(signum, frame):
    # SIGTERM (bin/test stopping a run in the background) unwinds like Ctrl-C: subprocess.call
    # kills the command, and the server stops on the way out instead of outliving the run.
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _stop)
    with PostgresServer() as server:
        print(f"PostgreSQL for the tests at {server.url}", flush=True)
        env = {**os.environ, "DATABASE_URL": server.url}
        return subprocess.call([sys.executable, *argv], env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
