"""The end users of a tenant's application: the names its requests carry (``user``,
``safety_identifier``, Anthropic's ``metadata.user_id``), their spend per month, and the
controls the tenant set on some of them (a monthly spend budget, a block)."""

from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models

from controlplane.billing.money import units_to_amount

MAX_NAME_LENGTH = 256


class EndUser(models.Model):
    """Controls on one end user of a tenant. End users with no row are still served and
    counted; a row exists only where the tenant (or an operator) set something."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="end_users")
    name = models.CharField(max_length=MAX_NAME_LENGTH, help_text="As the requests name them.")
    # Empty: the tenant's budget per end user applies (Tenant.end_user_monthly_spend_budget).
    monthly_spend_budget = models.DecimalField(
        max_digits=14,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(0))],
        help_text="Spend per calendar month (UTC); empty: the tenant's budget per end user.",
    )
    blocked = models.BooleanField(default=False, help_text="Refuse every request naming them.")
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="end_user_once_per_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.tenant})"


class EndUserMonthlySpend(models.Model):
    """One end user's totals for one calendar month (UTC), written by the usage flush in the
    transaction that writes the requests' records: what their budget is checked against."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="end_user_spend"
    )
    end_user = models.CharField(max_length=MAX_NAME_LENGTH)
    period = models.DateField()  # the month's first day
    num_requests = models.PositiveIntegerField(default=0)
    num_errors = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    cost_units = models.BigIntegerField(default=0)  # as UsageRecord.cost_units

    class Meta:
        ordering = ["-period", "-cost_units"]
        verbose_name_plural = "end user monthly spend"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "end_user", "period"], name="end_user_spend_once_per_month"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "period", "cost_units"])]

    def __str__(self) -> str:
        return f"{self.end_user} {self.period:%Y-%m}"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost(self) -> Decimal:
        return units_to_amount(self.cost_units)
