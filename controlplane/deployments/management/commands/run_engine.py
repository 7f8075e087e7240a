"""``manage.py run_engine --model NAME``: run one engine for a registered model (SIGTERM drains).

Django is used only to look the checkpoint up; the service itself is ``engine.service``, the
same one ``python -m engine`` runs.
"""

import argparse
import logging
import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from controlplane.deployments.models import ServedModel
from engine.service.cli import add_service_arguments, serve


class Command(BaseCommand):
    help = "Run one engine for a registered model in the foreground; SIGTERM drains it."

    def add_arguments(self, parser):
        parser.add_argument("--model", required=True, help="a name registered with load_model")
        add_service_arguments(parser)

    def handle(self, *args, **opts):
        model = ServedModel.objects.filter(name=opts["model"]).first()
        if model is None:
            known = ", ".join(ServedModel.objects.values_list("name", flat=True)) or "none"
            raise CommandError(
                f"no served model named {opts['model']!r} (registered: {known}); "
                "register one with manage.py load_model PATH --name NAME"
            )
        if not model.is_active:
            raise CommandError(f"served model {model.name!r} is deactivated")
        # The service reads its key prefix from the environment, as python -m engine does.
        os.environ["PLATFORM_REDIS_PREFIX"] = settings.PLATFORM_REDIS_PREFIX
        args = argparse.Namespace(**opts)
        args.redis_url = opts.get("redis_url") or settings.REDIS_URL
        logging.getLogger("engine").setLevel(opts["log_level"].upper())
        code = serve(args, model_path=model.path, model_name=model.name)
        if code:
            raise CommandError(f"engine exited with code {code}")
