"""The dedicated metrics port (METRICS_PORT): /metrics in a thread of each API process.

A second Daphne would cost a process per API process; prometheus_client serves its own port
the same way, from a thread. The thread renders the process's own registry, so the port
shows this process's django_http_* series as /metrics on the API port does. Requests pass
the same checks (access.py), except that an allowed network reads every series here: no
public proxy leads to this port, so the address is the scraper's own.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connections
from prometheus_client import CONTENT_TYPE_LATEST

from controlplane.metrics.access import PROXY_HEADERS, MetricsAccessDenied, check_metrics_access
from controlplane.metrics.exposition import render_metrics

logger = logging.getLogger(__name__)


class _MetricsHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if urlsplit(self.path).path != "/metrics":
            self._reply(404, b"not found: this port serves /metrics\n", "text/plain")
            return
        try:
            exposure = check_metrics_access(
                authorization=self.headers.get("Authorization"),
                client_host=self.client_address[0],
                proxied=any(header in self.headers for header in PROXY_HEADERS),
                dedicated_port=True,
            )
        except MetricsAccessDenied as denied:
            self._reply(denied.status, denied.message.encode(), "text/plain", denied.headers)
            return
        try:
            self._reply(200, render_metrics(exposure), CONTENT_TYPE_LATEST)
        finally:
            # The fleet's gauges read the database from this request's own thread: close its
            # connection, which no Django request cycle would close.
            connections.close_all()

    def _reply(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        logger.debug("metrics port: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _ServerIPv6(_Server):
    address_family = socket.AF_INET6


def start_metrics_port(host: str, port: int) -> ThreadingHTTPServer:
    """Serve /metrics on ``host:port`` from a daemon thread; ``shutdown()`` stops it. Several
    API processes of one platform (``PROMETHEUS_MULTIPROC_DIR`` set) each listen on the port
    (``SO_REUSEPORT``): each renders the totals of all, and the port outlives any one."""
    server_class = _ServerIPv6 if ":" in host else _Server
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        server_class = type(server_class.__name__, (server_class,), {"allow_reuse_port": True})
    server = server_class((host, port), _MetricsHandler)
    threading.Thread(target=server.serve_forever, name="metrics-port", daemon=True).start()
    return server


def start_configured_metrics_port() -> ThreadingHTTPServer | None:
    """The port METRICS_PORT names, on METRICS_ADDRESS, if set. A port another process holds
    is logged, not raised: the API serves on without it."""
    if not settings.METRICS_PORT:
        return None
    try:
        server = start_metrics_port(settings.METRICS_ADDRESS, settings.METRICS_PORT)
    except OSError:
        logger.error(
            "metrics: cannot listen on %s:%d; /metrics stays on the API port only",
            settings.METRICS_ADDRESS,
            settings.METRICS_PORT,
            exc_info=True,
        )
        return None
    logger.info(
        "metrics: serving /metrics on %s:%d", settings.METRICS_ADDRESS, settings.METRICS_PORT
    )
    return server
