"""``manage.py load_model PATH --name NAME``: validate a checkpoint and register it."""

from django.core.management.base import BaseCommand, CommandError

from controlplane.deployments.services import ModelRegistrationError, served_model_register


class Command(BaseCommand):
    help = "Validate a Hugging Face checkpoint and register (or update) it as a served model."

    def add_arguments(self, parser):
        parser.add_argument("path", help="checkpoint directory (config.json, *.safetensors, ...)")
        parser.add_argument("--name", required=True, help="the model name clients will use")

    def handle(self, *args, **opts):
        def progress(message: str) -> None:
            self.stdout.write(f"  {message}")

        self.stdout.write(f"Validating {opts['path']}")
        try:
            model = served_model_register(path=opts["path"], name=opts["name"], progress=progress)
        except ModelRegistrationError as exc:
            raise CommandError(f"not registered: {exc}") from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"Registered {model.name!r}: {model.architecture}, "
                f"{model.num_parameters / 1e6:.1f}M parameters, {model.dtype}, "
                f"context {model.max_model_len}"
            )
        )
        self.stdout.write(f"Start an engine with: python manage.py run_engine --model {model.name}")
