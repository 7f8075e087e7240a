"""manage.py set_model_price MODEL --input P --output P [--cached-input P] [--from ISO-TIME]:
a new price per million tokens for MODEL (the same service the admin uses)."""

from datetime import UTC, datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from controlplane.billing.money import currency
from controlplane.billing.services import model_price_set


def _time(value: str) -> datetime:
    """ISO 8601; without a time zone, UTC (the platform's time zone)."""
    when = datetime.fromisoformat(value)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Set a served model's price per million tokens from now (or --from) on."

    def add_arguments(self, parser):
        parser.add_argument("model")
        parser.add_argument("--input", type=Decimal, required=True, help="input tokens")
        parser.add_argument("--output", type=Decimal, required=True, help="output tokens")
        parser.add_argument(
            "--cached-input",
            type=Decimal,
            help="prompt tokens from the prefix cache (default: --input)",
        )
        parser.add_argument(
            "--from",
            dest="effective_from",
            type=_time,
            help="when it starts, ISO 8601 (UTC unless it names a zone; default: now)",
        )

    def handle(self, *args, model, input, output, cached_input, effective_from, **options):
        try:
            price = model_price_set(
                model=model,
                input_per_million=input,
                output_per_million=output,
                cached_input_per_million=cached_input,
                effective_from=effective_from,
                actor_label="manage.py",
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stdout.write(
            f"{price.model}: {price.input_per_million} in, {price.cached_input_price} cached, "
            f"{price.output_per_million} out ({currency()} per million tokens) "
            f"from {price.effective_from.isoformat()}"
        )
