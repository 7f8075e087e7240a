"""``manage.py run_engine --model NAME``: run one engine for a registered model (SIGTERM drains).

Django is used only to look the checkpoint up; the service itself is ``engine.service``, the
same one ``python -m engine`` runs, or for an embeddings model the pooling engine that
``python -m engine.pooling`` runs.
"""

import argparse
import logging
import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from controlplane.deployments.models import ServedModel
from controlplane.deployments.selectors import served_model_get, served_model_names
from engine.service.cli import add_service_arguments, serve


class Command(BaseCommand):
    help = "Run one engine for a registered model in the foreground; SIGTERM drains it."

    def add_arguments(self, parser):
        parser.add_argument("--model", required=True, help="a name registered with load_model")
        add_service_arguments(parser)

    def handle(self, *args, **opts):
        model = served_model_get(name=opts["model"])
        if model is None:
            known = ", ".join(served_model_names()) or "none"
            raise CommandError(
                f"no served model named {opts['model']!r} (registered: {known}); "
                "register one with manage.py load_model PATH --name NAME"
            )
        if not model.is_active:
            raise CommandError(f"served model {model.name!r} is deactivated")
        if not model.is_ready:
            raise CommandError(f"served model {model.name!r} is {model.state}, not ready")
        # The service reads its key prefix from the environment, as python -m engine does.
        os.environ["PLATFORM_REDIS_PREFIX"] = settings.PLATFORM_REDIS_PREFIX
        redis_url = opts.get("redis_url") or settings.REDIS_URL
        if model.is_embedding:
            self._run_pooling_engine(model, redis_url=redis_url, opts=opts)
            return
        args = argparse.Namespace(**opts)
        args.redis_url = redis_url
        # The model's registered quantization, unless this command line names one.
        args.quantization = opts.get("quantization") or model.quantization or None
        # Speculative decoding as the model's setting says, unless this command line turns it off.
        args.no_speculative_decoding = (
            opts["no_speculative_decoding"] or not model.speculative_decoding
        )
        logging.getLogger("engine").setLevel(opts["log_level"].upper())
        code = serve(args, model_path=model.path, model_name=model.name)
        if code:
            raise CommandError(f"engine exited with code {code}")

    @staticmethod
    def _run_pooling_engine(model: ServedModel, *, redis_url: str, opts: dict) -> None:
        """The pooling engine, with the options of this command line that apply to it (a
        node agent passes a generation engine's whole set; the rest have no meaning here)."""
        from engine.pooling.__main__ import main as pooling_main

        # The pooling engine runs on the CPU unless told otherwise, as python -m engine.pooling.
        device = "cpu" if opts["device"] == "auto" else opts["device"]
        args = [
            *("--model-path", model.path, "--model-name", model.name),
            *("--redis-url", redis_url, "--device", device),
        ]
        if opts.get("engine_id"):
            args += ["--engine-id", opts["engine_id"]]
        if opts.get("cpu_threads"):
            args += ["--cpu-threads", str(opts["cpu_threads"])]
        if opts.get("nice") is not None:
            args += ["--nice", str(opts["nice"])]
        pooling_main(args)
