"""A burst of new connections while Daphne is busy: the kernel queues them all.

Before: Daphne listened with Twisted's default backlog of 50, so of 200 connections opened at
once while it was busy (a fresh one loading the project, say) the kernel dropped the rest,
which clients saw as resets or waited out in SYN retries. daphne_command now listens through
a Twisted endpoint with a backlog of DAPHNE_LISTEN_BACKLOG.

The fault: Daphne stopped (SIGSTOP) while 200 clients connect, then resumed.
"""

from __future__ import annotations

import asyncio
import os
import signal
from urllib.parse import urlsplit

import pytest

from tests.support.fresh_daphne import fresh_daphne

pytestmark = [pytest.mark.faults, pytest.mark.slow]

NUM_CONNECTIONS = 200
# How long the connections may take to open while Daphne is stopped.
QUEUE_WINDOW_S = 10.0


async def _connect(host: str, port: int):
    return await asyncio.open_connection(host, port)


async def _health(connection) -> str:
    """/health over an open connection: the status line, or the error it met."""
    reader, writer = connection
    try:
        writer.write(b"GET /health HTTP/1.1\r\nHost: burst\r\nConnection: close\r\n\r\n")
        await writer.drain()
        return (await asyncio.wait_for(reader.readline(), 60)).decode().strip()
    except OSError as exc:  # ConnectionResetError and the like
        return type(exc).__name__
    finally:
        writer.close()


async def _burst_while_stopped(host: str, port: int, pid: int) -> tuple[int, list[str]]:
    """Connections the kernel completed while Daphne was stopped, and every answer after."""
    os.kill(pid, signal.SIGSTOP)
    try:
        tasks = [asyncio.create_task(_connect(host, port)) for _ in range(NUM_CONNECTIONS)]
        # The kernel completes handshakes into the accept queue; past the backlog it drops
        # them, and their retries too while the queue stays full (Daphne is stopped), so
        # waiting longer cannot raise the count past the backlog. It only gives a loaded
        # machine time to open them all: a 0.5 s window saw none of 200 in a CI run.
        done, _ = await asyncio.wait(tasks, timeout=QUEUE_WINDOW_S)
        queued = sum(1 for task in done if task.exception() is None)
    finally:
        os.kill(pid, signal.SIGCONT)
    connections = await asyncio.gather(*tasks, return_exceptions=True)
    answers = [
        type(c).__name__ if isinstance(c, BaseException) else await _health(c) for c in connections
    ]
    return queued, answers


def _somaxconn() -> int:
    """The kernel's cap on any listen backlog."""
    try:
        return int(open("/proc/sys/net/core/somaxconn").read())
    except OSError:
        return 4096


def test_a_burst_of_new_connections_is_queued_not_dropped(api_platform, tmp_path):
    if _somaxconn() < NUM_CONNECTIONS:
        pytest.skip(f"net.core.somaxconn caps every backlog at {_somaxconn()}; raise it")
    with fresh_daphne(api_platform.env, tmp_path) as daphne:
        address = urlsplit(daphne.base_url)
        queued, answers = asyncio.run(
            _burst_while_stopped(address.hostname, address.port, daphne.process.pid)
        )
    assert queued == NUM_CONNECTIONS, f"only {queued} connections queued while Daphne was busy"
    failed = [a for a in answers if not a.startswith("HTTP/1.1 200")]
    assert not failed, f"{len(failed)} of {NUM_CONNECTIONS} failed: {sorted(set(failed))}"
