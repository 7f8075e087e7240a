"""``manage.py make_demo_model PATH``: a random-weight checkpoint with a trained tokenizer."""

from django.core.management.base import BaseCommand, CommandError

from controlplane.deployments.services import ModelRegistrationError, demo_model_create


class Command(BaseCommand):
    help = "Write a random-weight demo checkpoint (noise, not language) to PATH."

    def add_arguments(self, parser):
        parser.add_argument("path")
        parser.add_argument(
            "--arch", default="llama", choices=["llama", "llama3", "mistral", "qwen2", "qwen3"]
        )
        parser.add_argument("--size", default="small", choices=["tiny", "small"])

    def handle(self, *args, **opts):
        self.stdout.write(f"Making a random-weight {opts['arch']} ({opts['size']}) checkpoint")
        try:
            path = demo_model_create(path=opts["path"], arch=opts["arch"], size=opts["size"])
        except ModelRegistrationError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.style.SUCCESS(f"Wrote {path}"))
        self.stdout.write(f"Register it with: python manage.py load_model {path} --name NAME")
