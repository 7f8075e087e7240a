"""Several API processes on one port (``serve --api-processes``), and the listening sockets the
launcher holds for them (controlplane/launcher/api_sockets.py)."""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.launcher.api_sockets import ApiSocketError, listening_sockets
from controlplane.launcher.redis_server import free_port
from tests.support.platform_services import platform_stack

pytestmark = pytest.mark.xdist_group("api_processes")


def test_sockets_share_one_port_and_the_kernel_hands_connections_to_each():
    sockets = listening_sockets("127.0.0.1", 0, 2)
    try:
        port = sockets[0].getsockname()[1]
        assert sockets[1].getsockname()[1] == port
        with pytest.raises(OSError):  # no other program takes the port meanwhile
            socket.create_server(("127.0.0.1", port))
        accepted_by = set()
        clients = []
        for _ in range(32):  # new connections, spread by the hash of their source port
            clients.append(socket.create_connection(("127.0.0.1", port)))
            ready, _, _ = select.select(sockets, [], [], 5)
            for sock in ready:
                sock.accept()[0].close()
                accepted_by.add(sock.fileno())
        assert accepted_by == {s.fileno() for s in sockets}
    finally:
        for sock in [*sockets, *clients]:
            sock.close()


def test_sockets_refuse_what_cannot_work_with_a_clear_error():
    with pytest.raises(ApiSocketError, match="IPv6"):
        listening_sockets("::1", 0, 2)
    with pytest.raises(ApiSocketError, match="at least one"):
        listening_sockets("127.0.0.1", 0, 0)
    with (
        socket.create_server(("127.0.0.1", 0)) as taken,
        pytest.raises(ApiSocketError, match=r"cannot listen on 127\.0\.0\.1"),
    ):
        listening_sockets("127.0.0.1", taken.getsockname()[1], 2)


def _answered_health(base_url: str) -> int:
    """200s of GET /health the platform has counted, as one scrape of /metrics says."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        if family.name == "django_http_responses_total_by_status_view_method":
            return int(
                sum(
                    s.value
                    for s in family.samples
                    if s.labels.get("view") == "health" and s.labels.get("status") == "200"
                )
            )
    raise AssertionError("no django_http_responses_total_by_status_view_method in /metrics")


def _health_on_a_new_connection(base_url: str) -> tuple[int, float]:
    with httpx.Client(timeout=30) as client:  # a client each: a new connection, a new hash
        status = client.get(f"{base_url}/health").status_code
    return status, time.monotonic()


def test_two_api_processes_count_as_one_and_a_crashed_one_loses_no_connection(tmp_path):
    with platform_stack(tmp_path, redis_prefix="apiprocs") as stack:
        metrics_port = free_port()
        env = {**stack.env, "METRICS_PORT": str(metrics_port)}
        base_url = stack.start_daphne(timeout=90, processes=2, env=env)
        first, second = stack.api_children
        assert first.pid != second.pid and first.running() and second.running()

        for _ in range(30):
            assert _health_on_a_new_connection(base_url)[0] == 200
        # Each scrape reaches one process of the two; each renders the totals of both.
        counts = [_answered_health(base_url) for _ in range(8)]
        assert all(count >= 30 for count in counts), counts

        # A crash: the kernel keeps queueing the dead process's share of new connections on
        # the socket the launcher holds; the restarted process answers them.
        os.kill(first.pid, signal.SIGKILL)
        first.process.wait(timeout=10)
        # Both processes listened on the metrics port: it outlives either.
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
        assert metrics.status_code == 200
        assert "django_http_responses_total_by_status_view_method" in metrics.text
        with ThreadPoolExecutor(max_workers=16) as pool:
            pending = [pool.submit(_health_on_a_new_connection, base_url) for _ in range(16)]
            time.sleep(1.5)
            # From this thread, as serve's restarter: a child dies with the thread that
            # started it (PR_SET_PDEATHSIG).
            restarted_at = time.monotonic()
            stack.supervisor.restart(first)
            results = [future.result() for future in pending]
        assert [status for status, _ in results] == [200] * 16
        answered_at = sorted(at for _, at in results)
        assert answered_at[0] < restarted_at, "the live process answered its share at once"
        assert answered_at[-1] > restarted_at, "the dead process's share waited for it"

        # The killed process's counts are kept: totals never go back.
        assert _answered_health(base_url) >= 30 + 16

        # The other one killed: the restarted process took the metrics port up again.
        os.kill(second.pid, signal.SIGKILL)
        second.process.wait(timeout=10)
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
        assert metrics.status_code == 200


def test_stopping_closes_the_port_before_the_slow_children_are_done(tmp_path):
    with platform_stack(tmp_path, redis_prefix="apistop") as stack:
        # Started before the API, so stopped after it: slow, as engines that drain.
        slow = stack.start(
            "slow-to-stop",
            [sys.executable, "-c", IGNORES_SIGTERM],
            stop_timeout=5,
        )
        base_url = stack.start_daphne(timeout=90)
        port = int(base_url.rsplit(":", 1)[1])
        (daphne,) = stack.api_children
        stopping = threading.Thread(target=stack.stop)
        stopping.start()
        try:
            deadline = time.monotonic() + 20
            while daphne.running() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # the sockets are closed right after the API's children stop
            assert slow.running(), "the slow child is still stopping"
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
        finally:
            stopping.join()


IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
)
