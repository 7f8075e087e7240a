"""The API's listening sockets, opened by the launcher and handed to each Daphne (``--fd``).

Two reasons to own them here rather than let Daphne bind its port:

- A Daphne that crashes and is started again (restarts.py) finds its socket where it left
  it: connections that arrive meanwhile wait in the kernel's queue and are answered by the new
  process, instead of being refused for the two seconds a restart takes.
- Several API processes (``--api-processes``) share one port. Each gets its own socket, all
  bound with ``SO_REUSEPORT``, so the kernel spreads new connections over them. One socket
  shared by every process would not: a Twisted process accepts in a loop, so whichever
  process wakes first takes a whole burst.

Twisted adopts only IPv4 sockets by descriptor (its ``fd:`` endpoint has no IPv6 family), so
an IPv6 host keeps Daphne binding the port itself, with one API process.
"""

from __future__ import annotations

import socket

from controlplane.launcher.process_commands import DAPHNE_LISTEN_BACKLOG


class ApiSocketError(RuntimeError):
    """The port cannot be listened on as asked (taken, or an IPv6 host with several
    processes)."""


def adoptable(host: str) -> bool:
    """Whether Daphne can take a socket for ``host`` by descriptor (IPv4 only)."""
    return ":" not in host


def listening_sockets(
    host: str, port: int, count: int, *, backlog: int = DAPHNE_LISTEN_BACKLOG
) -> list[socket.socket]:
    """``count`` listening sockets on ``host:port`` (port 0: one free port for all), each
    inheritable by a child. With more than one, each is bound with ``SO_REUSEPORT``."""
    if count < 1:
        raise ApiSocketError(f"at least one API process is needed, not {count}")
    if not adoptable(host):
        raise ApiSocketError(
            f"the API binds {host} itself (IPv6): run it with one API process, or on an "
            "IPv4 address"
        )
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if count > 1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]  # port 0: the others join the one it got
            sock.listen(backlog)
            sock.set_inheritable(True)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ApiSocketError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sockets
