"""`manage.py register_adapter`: part of DESIGN.md's command contract; LoRA adapters land with issue 7."""

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "LoRA adapter management (not implemented yet)."

    def add_arguments(self, parser):
        parser.add_argument("args", nargs="*")
        parser.add_argument("--name")
        parser.add_argument("--base")
        parser.add_argument("--tenant", action="append")

    def handle(self, *args, **options):
        raise CommandError(
            "not implemented yet: LoRA adapter management arrives with the LoRA issue"
        )
