"""Child processes for end-to-end tests: start with a log file, wait until ready, stop."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """Run ``args`` from the repository root with stdout and stderr going to ``log``."""
    with log.open("wb") as handle:
        return subprocess.Popen(args, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM (engines drain), then SIGKILL after 15 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(condition, *, timeout: float, what: str, process=None, log: Path | None = None):
    """Poll ``condition`` until true; fail early, with the log's tail, if ``process`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{tail}")
        try:
            if condition():
                return
        except Exception:  # not up yet: connection refused and the like
            pass
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log else ""
    raise RuntimeError(f"{what} not ready after {timeout}s:\n{tail}")


@contextmanager
def running(
    args: list[str],
    env: dict[str, str],
    log: Path,
    *,
    ready: Callable[[], bool],
    what: str,
    timeout: float,
) -> Iterator[subprocess.Popen]:
    """``args`` spawned and ``ready()`` true inside the block; the process stopped after it."""
    process = spawn(args, env, log)
    try:
        wait_for(ready, timeout=timeout, what=what, process=process, log=log)
        yield process
    finally:
        stop(process)
