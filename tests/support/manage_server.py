"""``manage.py ARGS`` for test fixtures, without a new Python process per command.

A command run as ``python manage.py`` spends about 1.5 s of CPU (2.5 s on a loaded CI runner)
importing Django and the project before it does anything; the suite ran about ninety of them,
three minutes of CPU on a two-core machine. Here one long-lived process per environment runs
them in turn (tests/support/manage_server_child.py): the same ``ManagementUtility`` that
manage.py calls, the same argument parsing, output and exit status (a ``CommandError`` is
still ``CommandError: ...`` on stderr and status 1), against the same database file and Redis.
Only the process start is shared.

:func:`run_manage` keeps the contract of ``controlplane.launcher.stack.run_manage``.
"""

from __future__ import annotations

import atexit
import json
import subprocess
import sys
import threading
from pathlib import Path

from controlplane.launcher.process_commands import REPO
from controlplane.launcher.stack import StartupError
from tests.support.processes import end_input_and_wait

_CHILD = Path(__file__).with_name("manage_server_child.py")


class ManageServer:
    """One child process on one environment, one command at a time."""

    def __init__(self, env: dict[str, str]):
        self.process = subprocess.Popen(
            [sys.executable, str(_CHILD)],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lock = threading.Lock()

    def run(self, args: tuple[str, ...], timeout: float) -> subprocess.CompletedProcess:
        with self.lock:
            self.process.stdin.write(json.dumps(list(args)) + "\n")
            self.process.stdin.flush()
            reply: list[str] = []
            reader = threading.Thread(target=lambda: reply.append(self.process.stdout.readline()))
            reader.start()
            reader.join(timeout)
            timed_out = reader.is_alive()
            if timed_out or not reply or not reply[0]:
                self.close(kill=True)
                if timed_out:
                    raise subprocess.TimeoutExpired(["manage.py", *args], timeout)
                raise StartupError(f"manage.py {' '.join(args)}: the command process died")
            done = json.loads(reply[0])
        return subprocess.CompletedProcess(
            ["manage.py", *args], done["returncode"], done["stdout"], done["stderr"]
        )

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self, *, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        end_input_and_wait(self.process)


# Fixtures of later tests use other environments (databases, Redis instances): the least
# recently used process goes when a new one would make more than this many.
MAX_SERVERS = 3
_servers: dict[tuple[tuple[str, str], ...], ManageServer] = {}
_servers_lock = threading.Lock()


def _server_for(env: dict[str, str]) -> ManageServer:
    key = tuple(sorted(env.items()))
    with _servers_lock:
        server = _servers.pop(key, None)
        if server is None or not server.alive:
            server = ManageServer(dict(env))
        _servers[key] = server  # last in the dict: the most recently used
        while len(_servers) > MAX_SERVERS:
            oldest = next(iter(_servers))
            _servers.pop(oldest).close()
        return server


def run_manage(
    env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``manage.py ARGS`` on ``env``; fails with its stderr when it fails."""
    done = _server_for(env).run(args, timeout)
    if done.returncode != 0:
        raise StartupError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done


@atexit.register
def _close_all() -> None:
    with _servers_lock:
        for server in _servers.values():
            server.close()
        _servers.clear()
