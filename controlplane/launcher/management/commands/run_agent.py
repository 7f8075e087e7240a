"""``manage.py run_agent --name NAME [--labels k=v ...] [--var-dir DIR]``: the node agent for
this host (controlplane/launcher/node_agent.py). SIGTERM or SIGINT stops its engines (they
drain) and marks the node gone."""

from __future__ import annotations

import signal
import socket
import threading
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from controlplane.common.redis_clients import sync_redis
from controlplane.launcher.node_agent import AgentSettings, NodeAgent


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise CommandError(f"a label is KEY=VALUE, not {text!r}")
    return key, value


class Command(BaseCommand):
    help = "Run the node agent: start, watch and stop the engines the fleet placed on this host."

    def add_arguments(self, parser):
        parser.add_argument("--name", default=socket.gethostname(), help="node name (unique)")
        parser.add_argument("--labels", nargs="*", default=[], metavar="KEY=VALUE")
        parser.add_argument("--var-dir", default=None, help="engine logs (default: VAR_DIR)")
        parser.add_argument("--heartbeat", type=float, default=1.0, help="seconds per beat")
        parser.add_argument(
            "--node-ttl", type=float, default=5.0, help="seconds without a beat: node lost"
        )
        parser.add_argument(
            "--max-restarts",
            type=int,
            default=3,
            help="restarts in a row before a replica is failed (a 10-minute run resets the row)",
        )
        parser.add_argument("--backoff", type=float, default=2.0, help="first restart delay, s")
        parser.add_argument("--drain-timeout", type=float, default=30.0)
        parser.add_argument(
            "--memory-gb", type=float, default=None, help="memory to offer (default: the host's)"
        )

    def handle(self, *args, **opts):
        try:
            config = AgentSettings(
                name=opts["name"],
                var_dir=Path(opts["var_dir"] or settings.VAR_DIR),
                labels=dict(_label(text) for text in opts["labels"]),
                heartbeat_s=opts["heartbeat"],
                node_ttl_s=opts["node_ttl"],
                max_restarts=opts["max_restarts"],
                backoff_s=opts["backoff"],
                drain_timeout_s=opts["drain_timeout"],
                memory_bytes=int(opts["memory_gb"] * 2**30) if opts["memory_gb"] else None,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(f"node agent {config.name} running (engine logs in {config.var_dir})")
        NodeAgent(config, sync_redis()).run(stop)
        self.stdout.write(f"node agent {config.name} stopped")
