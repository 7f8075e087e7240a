"""The local usage spool: where a process keeps usage events while Redis cannot take them.

One append-only JSONL file per process (``{var}/usage-spool/{host}-{pid}.jsonl``), each line
fsync'd before ``append`` returns, so an event survives the process dying right after. The
process replays its spool into the Redis queue on its next successful push; the usage flush
writes the spools of processes that died (same host, pid gone) straight to the database. A
line replayed twice is harmless: the flush writes each event id once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)

SUFFIX = ".jsonl"


def spool_dir() -> Path:
    return Path(settings.VAR_DIR) / "usage-spool"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _read_lines(path: Path) -> list[bytes]:
    try:
        return [line for line in path.read_bytes().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


class UsageSpool:
    """This process's spool file (thread-safe: appends and the replay take one lock)."""

    def __init__(self, directory: Path | None = None):
        self._directory = directory
        self._lock = threading.Lock()
        self._pending: bool | None = None  # None: not looked yet (a file left by a former pid)

    @property
    def path(self) -> Path:
        directory = self._directory or spool_dir()
        return directory / f"{socket.gethostname()}-{os.getpid()}{SUFFIX}"

    def append(self, raw_event: bytes) -> None:
        with self._lock:
            path = self.path
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, raw_event + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            self._pending = True

    def has_events(self) -> bool:
        if self._pending is None:
            self._pending = self.path.exists()
        return self._pending

    def replay(self, push: Callable[[list[bytes]], object]) -> int:
        """Hand every spooled event to ``push`` (an RPUSH), then empty the spool; returns how
        many. If ``push`` raises, the spool is kept for the next try."""
        with self._lock:
            path = self.path
            lines = _read_lines(path)
            if lines:
                push(lines)
            path.unlink(missing_ok=True)
            self._pending = False
        if lines:
            logger.warning("replayed %d spooled usage events into Redis", len(lines))
        return len(lines)


def orphaned_spools(directory: Path | None = None) -> Iterator[Path]:
    """Spool files of this host's processes that are gone (nobody else will replay them)."""
    directory = directory or spool_dir()
    host = socket.gethostname()
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        name_host, _, pid = path.name.removesuffix(SUFFIX).rpartition("-")
        if name_host == host and pid.isdigit() and not _alive(int(pid)):
            yield path


def take_orphaned(write: Callable[[list[bytes]], object], directory: Path | None = None) -> int:
    """Write dead processes' spooled events with ``write`` (to the database), then delete the
    files; returns how many events."""
    total = 0
    for path in orphaned_spools(directory):
        lines = _read_lines(path)
        if lines:
            write(lines)
        path.unlink(missing_ok=True)
        total += len(lines)
    return total


spool = UsageSpool()
