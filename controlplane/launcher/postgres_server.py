"""Start and stop a private PostgreSQL server for the test suite (no system service needed).

PostgreSQL refuses to run as root, so when this process is root the server runs as the
``postgres`` system user (Debian's package creates it). Nothing here imports Django.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from controlplane.launcher.redis_server import free_port
from controlplane.launcher.supervisor import die_with_parent


class PostgresUnavailable(RuntimeError):
    pass


def find_postgres_bindir() -> Path:
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for bindir in candidates:
        if bindir and (Path(bindir) / "initdb").is_file() and (Path(bindir) / "postgres").is_file():
            return Path(bindir)
    raise PostgresUnavailable("PostgreSQL server binaries not found (apt-get install postgresql)")


class PostgresServer:
    """A throwaway cluster in a temporary directory, listening on 127.0.0.1:<free port>."""

    def __init__(self, *, port: int | None = None):
        self.port = port or free_port()
        self.bindir = find_postgres_bindir()
        self.workdir = Path(tempfile.mkdtemp(prefix="llmp-pg-"))
        self.datadir = self.workdir / "data"
        self.process: subprocess.Popen | None = None
        self.user = "postgres"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def _as_owner(self):
        if os.geteuid() != 0:
            self.user = pwd.getpwuid(os.geteuid()).pw_name
            return None
        owner = pwd.getpwnam("postgres")
        os.chown(self.workdir, owner.pw_uid, owner.pw_gid)

        def demote():
            os.setgid(owner.pw_gid)
            os.setuid(owner.pw_uid)
            die_with_parent()

        return demote

    def start(self, timeout: float = 30.0) -> PostgresServer:
        demote = self._as_owner()
        init = subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "-U",
                self.user,
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            capture_output=True,
            text=True,
            preexec_fn=demote,
        )
        if init.returncode != 0:
            raise PostgresUnavailable(f"initdb failed:\n{init.stderr[-2000:]}")
        self.process = subprocess.Popen(
            [
                str(self.bindir / "postgres"),
                "-D",
                str(self.datadir),
                "-p",
                str(self.port),
                "-h",
                "127.0.0.1",
                "-k",
                str(self.workdir),
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(self.workdir / "postgres.log").open("wb"),
            preexec_fn=demote or die_with_parent,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.workdir / "postgres.log").read_text(errors="replace")[-2000:]
                raise PostgresUnavailable(f"postgres exited at start:\n{log}")
            ready = subprocess.run(
                [str(self.bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
            )
            if ready.returncode == 0:
                return self
            time.sleep(0.2)
        self.stop()
        raise PostgresUnavailable(f"postgres did not accept connections within {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: "smart" shutdown
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
