"""``manage.py deploy NAME --replicas N [--model M] [engine settings]``: create or update a
deployment; the node agents' reconciler places its replicas."""

from __future__ import annotations

import argparse
import json

from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.services import shell_actor
from controlplane.fleet.services import DeploymentError, deployment_deploy


class Command(BaseCommand):
    help = "Deploy a served model on the engine fleet (create, or update and retry failed)."

    def add_arguments(self, parser):
        parser.add_argument("name", help="deployment name (default model: the same name)")
        parser.add_argument("--replicas", type=int, required=True)
        parser.add_argument("--model", default=None, help="served model (default: NAME)")
        parser.add_argument("--device", choices=["cpu", "cuda", "auto"], default=None)
        parser.add_argument("--dtype", default=None)
        parser.add_argument("--quantization", choices=["int8", "int4"], default=None)
        parser.add_argument("--max-model-len", type=int, default=None)
        parser.add_argument("--max-num-seqs", type=int, default=None)
        parser.add_argument("--kv-cache-gb", type=float, default=None)
        parser.add_argument("--cpu-threads", type=int, default=None)
        parser.add_argument(
            "--scale-to-zero",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="unload after --idle-timeout without requests; the next request loads it",
        )
        parser.add_argument("--idle-timeout", type=int, default=None, metavar="SECONDS")
        parser.add_argument(
            "--node-selector", nargs="*", default=None, metavar="KEY=VALUE", help="node labels"
        )

    def handle(self, *args, **opts):
        names = ("device", "dtype", "quantization", "max_model_len", "max_num_seqs")
        names += ("kv_cache_gb", "cpu_threads", "scale_to_zero")
        settings = {name: opts[name] for name in names if opts[name] is not None}
        if opts["idle_timeout"] is not None:
            settings["idle_timeout_s"] = opts["idle_timeout"]
        if opts["node_selector"] is not None:
            pairs = [text.partition("=") for text in opts["node_selector"]]
            settings["node_selector"] = {key: value for key, _, value in pairs}
        try:
            deployment = deployment_deploy(
                name=opts["name"],
                model=opts["model"],
                replicas=opts["replicas"],
                actor_label=shell_actor("deploy"),
                **settings,
            )
        except DeploymentError as exc:
            raise CommandError(str(exc)) from exc
        shown = {"replicas": deployment.replicas, **settings}
        self.stdout.write(f"deployed {deployment.name}: {json.dumps(shown)}")
