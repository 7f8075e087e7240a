"""Child processes for end-to-end tests: start with a log file, wait until ready, stop."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from controlplane.launcher.process_commands import manage_command
from controlplane.launcher.stack import Stack, wait_until
from controlplane.launcher.supervisor import Child

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


def end_input_and_wait(process: subprocess.Popen, timeout: float = 10) -> None:
    """A process that reads commands from stdin until it ends: close its stdin and let it exit,
    killing it if it has not after ``timeout`` seconds."""
    process.stdin.close()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def pids_with_env(marker: str) -> list[int]:
    """Processes (but this one) whose environment carries ``marker`` (``NAME=value``): every
    descendant of a command started with it, however deep."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def nice_of(stat: Path) -> int:
    """The nice value in a ``/proc/<pid>[/task/<tid>]/stat`` file (field 19, counted after the
    command name, which may hold spaces)."""
    return int(stat.read_text().rsplit(")", 1)[1].split()[16])


def autogroup_nice(pid: int) -> str | None:
    """The nice value of a process's autogroup, or None where there is none to read: a kernel
    without autogroups, or a process still in the boot session's group (the file is empty)."""
    try:
        fields = Path(f"/proc/{pid}/autogroup").read_text().split()
    except OSError:
        return None
    return fields[-1] if fields else None


def wait_for(
    condition, *, timeout: float, what: str, process=None, log: Path | None = None, poll=0.2
):
    """Poll ``condition`` until true; fail early, with the log's tail, if ``process`` exits
    (the launcher's wait-until-ready, for a process a test started by hand)."""
    watched = [Child(what, [], log or Path(os.devnull), process=process)] if process else []
    wait_until(condition, timeout=timeout, what=what, children=watched, poll=poll)


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
    """``args`` started as the launcher starts a platform process and ``ready()`` true inside
    the block; the process stopped after it."""
    with Stack(log.parent) as stack:
        yield stack.start(what, args, ready=ready, timeout=timeout, log=log, env=env).process


def serve_until_up(
    env: dict[str, str], *args: str, timeout: float = 300
) -> tuple[subprocess.Popen, str, str]:
    """``manage.py serve ARGS`` until its banner says it is up: the process, what it printed
    so far and the demo API key the banner shows. Fails with that output if it exits first
    or takes longer than ``timeout`` seconds."""
    proc = subprocess.Popen(
        manage_command("serve", *args),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        if "Press Ctrl-C" in line:
            key = next(ln.split()[-1] for ln in lines if ln.strip().startswith("Demo API key"))
            return proc, "".join(lines), key
    proc.kill()
    raise AssertionError("serve did not come up:\n" + "".join(lines))
