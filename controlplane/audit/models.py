"""The audit log: who changed what on tenants, keys, adapters and deployments, and when."""

from django.conf import settings
from django.db import models


class AuditEvent(models.Model):
    """One administrative action. Rows are append-only; the admin shows them read-only."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # The acting user; ``actor_label`` survives the user's deletion and names non-user actors
    # ("manage.py", "system").
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_label = models.CharField(max_length=200)
    action = models.CharField(max_length=100, db_index=True)  # e.g. "api_key.revoke"
    target_type = models.CharField(max_length=100)  # e.g. "tenants.apikey"
    target_id = models.CharField(max_length=100, blank=True)
    target_repr = models.CharField(max_length=300, blank=True)
    # What changed. Never secrets: services pass only names, prefixes and limits.
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action}"
