"""``manage.py restart_deployment NAME``: restart a deployment's replicas one at a time with
the same settings (a new replica is ready before an old one drains; ``fleet/rollout.py``)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.services import shell_actor
from controlplane.fleet.services import DeploymentError, deployment_restart


class Command(BaseCommand):
    help = "Rolling restart of a deployment's replicas (same settings, one at a time)."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, **opts):
        try:
            deployment = deployment_restart(
                name=opts["name"], actor_label=shell_actor("restart_deployment")
            )
        except DeploymentError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"restarting {deployment.name}: {deployment.replicas} replicas roll onto "
            f"generation {deployment.generation}, one at a time"
        )
