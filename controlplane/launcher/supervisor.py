"""Run the platform's processes as children and stop every one of them on the way out.

Each child gets its own session (so a Ctrl-C in the terminal reaches only the supervisor,
which then stops children in order: web first, engines drain, Redis last) and a parent-death
signal (so even a SIGKILL of the supervisor leaves nothing running).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to SIGTERM this process when its parent dies (runs between fork and exec)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux: the supervisor's own shutdown still stops children
        pass


@dataclass
class Child:
    name: str
    args: list[str]
    log_path: Path
    # The whole environment (see process_commands.platform_environment); None: this process's.
    env: dict[str, str] | None = None
    # Seconds to wait after SIGTERM before SIGKILL (engines drain for a while).
    stop_timeout: float = 10.0
    # Working directory; None: this process's.
    cwd: Path | None = None
    # Descriptors the child inherits at every start (the API's listening socket).
    pass_fds: tuple[int, ...] = ()
    process: subprocess.Popen | None = None
    started_at: float = 0.0  # time.monotonic() of the last start

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class Supervisor:
    """Starts children, notices when one dies, and stops them all in reverse start order."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def start(self, child: Child) -> Child:
        self._spawn(child)
        self.children.append(child)
        return child

    def restart(self, child: Child) -> None:
        """Start an exited child again, as it was started (its place in the stop order kept);
        what is left of its process group is swept first."""
        self._signal_group(child, signal.SIGKILL)
        self._spawn(child)

    def _spawn(self, child: Child) -> None:
        child.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = child.log_path.open("ab")
        child.process = subprocess.Popen(
            child.args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child.env,
            cwd=child.cwd,
            pass_fds=child.pass_fds,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        log.close()
        child.started_at = time.monotonic()
        logger.debug("started %s pid=%d", child.name, child.process.pid)

    def first_dead(self) -> Child | None:
        return next((c for c in self.children if not c.running()), None)

    def stop_all(self, *, on_stop=None) -> None:
        for child in reversed(self.children):
            if on_stop:
                on_stop(child)
            self._stop(child)

    def stop(self, child: Child) -> None:
        """Stop one child now and forget it (a test that restarts an engine, say)."""
        self._stop(child)
        self.children = [c for c in self.children if c is not child]

    def terminate(self, child: Child) -> None:
        """SIGTERM the child's group now and return (an engine drains meanwhile); the caller
        polls ``child.running()`` and calls ``stop`` to sweep and forget it."""
        if child.running():
            self._signal_group(child, signal.SIGTERM)

    @staticmethod
    def _signal_group(child: Child, sig: int) -> None:
        try:
            os.killpg(child.process.pid, sig)  # the whole group: workers forked by the child too
        except (ProcessLookupError, PermissionError):
            pass

    def _stop(self, child: Child) -> None:
        if child.process is None:
            return
        if child.running():
            self._signal_group(child, signal.SIGTERM)
            deadline = time.monotonic() + child.stop_timeout
            while child.running() and time.monotonic() < deadline:
                time.sleep(0.1)
        # Grandchildren may outlive a child that exited on SIGTERM: sweep the group.
        self._signal_group(child, signal.SIGKILL)
        try:
            child.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
