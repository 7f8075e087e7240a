"""``manage.py undeploy NAME``: delete a deployment; its engines drain and stop."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from controlplane.audit.services import shell_actor
from controlplane.fleet.services import DeploymentError, deployment_undeploy


class Command(BaseCommand):
    help = "Delete a deployment; the node agents drain and stop its engines."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, **opts):
        try:
            deployment_undeploy(name=opts["name"], actor_label=shell_actor("undeploy"))
        except DeploymentError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"undeployed {opts['name']}")
