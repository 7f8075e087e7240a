"""Tenants and their API keys."""

from django.db import models


class Tenant(models.Model):
    """A customer of the platform: its keys, limits, grants and a private prefix-cache salt."""

    name = models.CharField(max_length=200, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    is_active = models.BooleanField(default=True)
    # Secret mixed into every engine request's prefix-cache key: tenants never share KV blocks.
    cache_salt = models.CharField(max_length=64, editable=False)
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    max_concurrent_requests = models.PositiveIntegerField(null=True, blank=True)
    monthly_token_budget = models.PositiveBigIntegerField(null=True, blank=True)
    allowed_models = models.ManyToManyField(
        "deployments.ServedModel", blank=True, related_name="tenants"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """An API key. Only a hash of the secret is stored; the secret is shown once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, default="default")
    # The visible part ("sk-" + 8 characters) that identifies a key in lists and logs.
    prefix = models.CharField(max_length=32, unique=True)
    secret_hash = models.CharField(max_length=128)
    scopes = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.tenant.name}/{self.name})"
