"""Usage: one record per API request, and daily rollups per tenant, key, model and adapter."""

from decimal import Decimal

from django.db import models

from controlplane.billing.money import units_to_amount


class UsageRecord(models.Model):
    """One finished request, written in batches by ``usage_flush`` (never on the request path)."""

    created_at = models.DateTimeField(db_index=True)  # when the request finished
    request_id = models.CharField(max_length=64, blank=True)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="usage")
    api_key = models.ForeignKey(
        "tenants.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="usage"
    )
    key_prefix = models.CharField(max_length=32, blank=True)  # "session" for the playground
    model = models.CharField(max_length=200)
    adapter = models.CharField(max_length=200, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0)
    time_to_first_token = models.FloatField(null=True, blank=True)  # seconds
    latency = models.FloatField(default=0.0)  # seconds
    status = models.PositiveSmallIntegerField(default=200)  # HTTP status answered
    finish_reason = models.CharField(max_length=32, blank=True)
    # The usage event's own id: a replayed or re-flushed event never makes a second record.
    event_id = models.CharField(max_length=64, null=True, blank=True, unique=True)
    # Set for a request run by the Batch API (the batch's id); empty for live traffic.
    batch_id = models.CharField(max_length=64, blank=True, db_index=True)
    # The request's ``user`` (Anthropic's metadata.user_id): the tenant's own end user, as its
    # application names them, for spend per end user. Empty when the request named none.
    end_user = models.CharField(max_length=256, blank=True)
    # What the request cost at the model's price in effect when it finished, in units of
    # 10^-10 of BILLING_CURRENCY (exact; controlplane/billing/money.py). 0: no price set.
    cost_units = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "created_at"]),
            models.Index(fields=["tenant", "end_user", "created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.key_prefix} {self.model}"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost(self) -> Decimal:
        return units_to_amount(self.cost_units)


class DailyUsage(models.Model):
    """Totals for one day, tenant, key, model and adapter (UTC days)."""

    date = models.DateField()
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="daily_usage"
    )
    key_prefix = models.CharField(max_length=32, blank=True)
    model = models.CharField(max_length=200)
    adapter = models.CharField(max_length=200, blank=True)
    num_requests = models.PositiveIntegerField(default=0)
    num_errors = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    cost_units = models.BigIntegerField(default=0)  # as UsageRecord.cost_units

    class Meta:
        ordering = ["-date", "tenant_id", "model"]
        verbose_name_plural = "daily usage"
        constraints = [
            models.UniqueConstraint(
                fields=["date", "tenant", "key_prefix", "model", "adapter"],
                name="daily_usage_unique_group",
            )
        ]

    def __str__(self) -> str:
        return f"{self.date} {self.tenant_id} {self.key_prefix} {self.model}"

    @property
    def cost(self) -> Decimal:
        return units_to_amount(self.cost_units)
