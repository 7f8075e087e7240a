"""Tenants and their API keys."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

# Endpoint names a key's scopes may list; an empty scope list means every endpoint of the
# OpenAI API. ``admin`` (the management API under /api/, controlplane/management_api/) is
# never implied: a key must list it, and only a staff user's own key may
# (``admin_scope_check``). ``end_users`` (budgets and blocks of the tenant's end users,
# /v1/end_users) is never implied either: the key must list it.
# ``controlplane.access.principals`` normalises a request path ("/v1/chat/completions") to these names.
API_SCOPES = (
    "chat.completions",
    "completions",
    "responses",
    "messages",
    "embeddings",
    "rerank",  # /v1/rerank and /v2/rerank
    "score",
    "files",
    "batches",
    "models",
    "tokenize",
    "detokenize",
    "playground",
    "websocket",
    "end_users",
    "admin",
)
END_USERS_SCOPE = "end_users"
ADMIN_SCOPE = "admin"
MAX_SHARE_WEIGHT = 1000
SERVICE_CLASSES = ("interactive", "batch")  # as engine.core.fair_share.SERVICE_CLASSES


class Tenant(models.Model):
    """A customer of the platform: its keys, limits, grants and a private prefix-cache salt."""

    name = models.CharField(max_length=200, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    is_active = models.BooleanField(default=True)
    # Secret mixed into every engine request's prefix-cache key: tenants never share KV blocks.
    # Never shown, never sent to clients; rotate it with ``tenant_rotate_cache_salt``.
    cache_salt = models.CharField(max_length=64, editable=False)
    cache_salt_rotated_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Limits; empty means unlimited.
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    max_concurrent_requests = models.PositiveIntegerField(null=True, blank=True)
    monthly_token_budget = models.PositiveBigIntegerField(null=True, blank=True)
    # Fair share in the engines (engine/core/fair_share.py): a tenant of weight 3 gets three
    # times the tokens of a tenant of weight 1 while both wait; every interactive request goes
    # before any batch one. Batch API lines always run in the batch class.
    share_weight = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_SHARE_WEIGHT)],
        help_text="Relative share of the engines' tokens while tenants compete (1-1000).",
    )
    service_class = models.CharField(
        max_length=16,
        choices=[("interactive", "interactive"), ("batch", "batch")],
        default="interactive",
        help_text="Interactive requests are scheduled before batch ones.",
    )
    # Zero data retention: nothing a request sends or gets is kept on the server (stored
    # responses, stored chat completions, conversations); docs/operations.md.
    zero_data_retention = models.BooleanField(
        default=False,
        help_text="Keep nothing clients send or get: store is treated as false, and "
        "conversations and background responses are refused.",
    )
    # Spend per calendar month (UTC) in BILLING_CURRENCY, priced by controlplane/billing.
    monthly_spend_budget = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True
    )
    # Spend per calendar month of each end user its requests name (``user``,
    # ``safety_identifier``), unless an end user has a budget of their own (end_users app).
    end_user_monthly_spend_budget = models.DecimalField(
        "budget per end user",
        max_digits=14,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="Monthly spend of each end user the requests name; empty: none.",
    )
    # Receives a JSON POST when spend crosses an alert threshold of this tenant's budgets.
    budget_alert_webhook_url = models.URLField(max_length=500, blank=True)
    # Grants. No model granted means every served model. Adapter grants live on the adapter
    # (``Adapter.tenants``, reverse name ``tenant.allowed_adapters``), read from the per-process
    # model catalog (controlplane/catalog/cache.py); granting bumps the catalog's epoch.
    allowed_models = models.ManyToManyField(
        "deployments.ServedModel", blank=True, related_name="tenants"
    )
    # The staff user whose browser playground this tenant serves (None for customers).
    playground_user = models.OneToOneField(
        "auth.User",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="playground_tenant",
        editable=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        # Superusers hold it implicitly; other staff need it for a playground of their own.
        permissions = [("use_playground", "Can use the playground (a private tenant)")]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """An API key. Only a keyed hash of the secret is stored; the secret is shown once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, default="default")
    # The visible part ("sk-" + 8 characters) that identifies a key in lists and logs.
    prefix = models.CharField(max_length=32, unique=True, editable=False)
    secret_hash = models.CharField(max_length=128, editable=False)
    scopes = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Flushed from Redis periodically (see ``api_key_flush_last_used``), never per request.
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    # This key's own spend per calendar month, inside its tenant's budget; empty: none.
    monthly_spend_budget = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.tenant.name}/{self.name})"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None
