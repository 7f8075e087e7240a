"""``manage.py scale NAME N``: set a deployment's replicas (0 stops them all)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.services import shell_actor
from controlplane.fleet.services import DeploymentError, deployment_scale


class Command(BaseCommand):
    help = "Set the number of replicas of a deployment."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("replicas", type=int)

    def handle(self, *args, **opts):
        try:
            deployment = deployment_scale(
                name=opts["name"], replicas=opts["replicas"], actor_label=shell_actor("scale")
            )
        except DeploymentError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"scaled {deployment.name} to {deployment.replicas} replicas")
