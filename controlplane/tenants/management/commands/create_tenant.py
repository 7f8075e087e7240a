"""manage.py create_tenant NAME [--rpm N] [--tpm N] [--max-concurrent N] [--monthly-budget N]
[--model NAME ...] [--weight N] [--service-class interactive|batch]
[--monthly-spend-budget AMOUNT] [--end-user-spend-budget AMOUNT] [--budget-webhook URL]
[--zero-data-retention]."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from controlplane.common.platform_location import change_not_announced, warn_if_no_running_platform
from controlplane.tenants.services import tenant_create, tenant_set_allowed_models


def positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


class Command(BaseCommand):
    help = "Create a tenant with optional limits (unset limits are unlimited)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--rpm", type=positive, help="requests per minute")
        parser.add_argument("--tpm", type=positive, help="tokens per minute")
        parser.add_argument("--max-concurrent", type=positive, help="concurrent requests")
        parser.add_argument("--monthly-budget", type=positive, help="tokens per calendar month")
        parser.add_argument(
            "--monthly-spend-budget",
            type=Decimal,
            help="spend per calendar month, in BILLING_CURRENCY (e.g. 250.00)",
        )
        parser.add_argument(
            "--end-user-spend-budget",
            type=Decimal,
            help="spend per calendar month of each end user the requests name (user, "
            "safety_identifier), in BILLING_CURRENCY",
        )
        parser.add_argument(
            "--budget-webhook", default="", help="URL that receives budget alerts (JSON POST)"
        )
        parser.add_argument(
            "--model", action="append", default=[], help="grant only this model (repeatable)"
        )
        parser.add_argument(
            "--weight", type=positive, default=1, help="fair-share weight in the engines (1-1000)"
        )
        parser.add_argument(
            "--service-class",
            choices=["interactive", "batch"],
            default="interactive",
            help="interactive requests are scheduled before batch ones",
        )
        parser.add_argument(
            "--zero-data-retention",
            action="store_true",
            help="keep nothing clients send or get (no stored responses, chat completions or "
            "conversations)",
        )

    def handle(
        self,
        *args,
        name,
        rpm,
        tpm,
        max_concurrent,
        monthly_budget,
        model,
        weight,
        service_class,
        monthly_spend_budget,
        end_user_spend_budget,
        budget_webhook,
        zero_data_retention,
        **options,
    ):
        warn_if_no_running_platform(self, change_not_announced("The tenant"))
        try:
            tenant = tenant_create(
                name=name,
                requests_per_minute=rpm,
                tokens_per_minute=tpm,
                max_concurrent_requests=max_concurrent,
                monthly_token_budget=monthly_budget,
                share_weight=weight,
                service_class=service_class,
                monthly_spend_budget=monthly_spend_budget,
                end_user_monthly_spend_budget=end_user_spend_budget,
                budget_alert_webhook_url=budget_webhook,
                zero_data_retention=zero_data_retention,
                actor_label="manage.py",
            )
            if model:
                tenant_set_allowed_models(tenant=tenant, model_names=model, actor_label="manage.py")
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stdout.write(f"created tenant {tenant.name!r} (slug {tenant.slug})")
