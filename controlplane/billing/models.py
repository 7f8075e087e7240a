"""Prices per model, with history, and the budget alerts already sent."""

from django.db import models
from django.utils import timezone

from controlplane.billing.money import PRICE_DECIMAL_PLACES


def _price_field(verbose_name: str, **options) -> models.DecimalField:
    return models.DecimalField(
        verbose_name, max_digits=12, decimal_places=PRICE_DECIMAL_PLACES, **options
    )


class ModelPrice(models.Model):
    """The price of one model from ``effective_from`` until the next row of the same model.

    A price change is a new row: usage is priced by the row in effect when its request
    finished, so usage recorded earlier keeps the price it was recorded at. Rows in effect are
    never edited (the admin offers a new row instead).
    """

    model = models.CharField(max_length=200, db_index=True, help_text="A served model's name.")
    input_per_million = _price_field("input, per million tokens")
    # Empty: prompt tokens served from the prefix cache cost the input price.
    cached_input_per_million = _price_field(
        "cached input, per million tokens", null=True, blank=True
    )
    output_per_million = _price_field("output, per million tokens")
    effective_from = models.DateTimeField(default=timezone.now, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model", "-effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["model", "effective_from"], name="model_price_once"),
        ]

    def __str__(self) -> str:
        return f"{self.model} from {self.effective_from:%Y-%m-%d %H:%M}"

    @property
    def cached_input_price(self):
        if self.cached_input_per_million is None:
            return self.input_per_million
        return self.cached_input_per_million


class BudgetAlert(models.Model):
    """A threshold of a monthly spend budget crossed: at most one row (one alert) per budget,
    month and threshold, which the unique constraint guarantees across flushes."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="budget_alerts"
    )
    key_prefix = models.CharField(max_length=32, blank=True)  # empty: the tenant's own budget
    # Set for an end user's budget (end_users app): their name as the requests give it.
    end_user = models.CharField(max_length=256, blank=True)
    period = models.DateField()  # the month's first day
    threshold = models.PositiveSmallIntegerField()  # percent of the budget
    spent_units = models.BigIntegerField()  # spend when it fired (see money.py)
    budget = models.DecimalField(max_digits=14, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)
    # "": no webhook configured; "pending", "sent" or "failed" (after the last retry).
    webhook_state = models.CharField(max_length=16, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "key_prefix", "end_user", "period", "threshold"],
                name="budget_alert_once_per_budget",
            ),
        ]

    @property
    def budget_of(self) -> str:
        if self.end_user:
            return f"end user {self.end_user}"
        return f"key {self.key_prefix}" if self.key_prefix else "tenant"

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.budget_of} {self.period:%Y-%m} {self.threshold}%"
