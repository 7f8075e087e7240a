"""A LoRA adapter served on top of one base model, and the tenants allowed to call it."""

from django.core.validators import RegexValidator
from django.db import models

# Adapters are called as OpenAI model names: keep them URL- and log-safe.
adapter_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$",
    "Use letters, digits and . _ : / - (starting with a letter or digit), at most 200.",
)


class Adapter(models.Model):
    """A PEFT LoRA adapter: its files, its validation state and its grants.

    ``checksum`` (sha256 of the files, set by validation) and ``name`` form the identity the
    engine mixes into prefix-cache keys, so changed files never reuse another version's KV.
    """

    class State(models.TextChoices):
        UPLOADED = "uploaded", "uploaded (waiting for validation)"
        VALIDATING = "validating", "validating"
        READY = "ready", "ready"
        FAILED = "failed", "failed"

    name = models.CharField(max_length=200, unique=True, validators=[adapter_name_validator])
    base_model = models.ForeignKey(
        "deployments.ServedModel", on_delete=models.PROTECT, related_name="adapters"
    )
    # Directory holding adapter_config.json and adapter_model.safetensors.
    path = models.CharField(max_length=1000)
    # True when the platform stored the files (an upload): they are deleted with the adapter.
    # A registered path belongs to the operator and is never touched.
    stored_by_platform = models.BooleanField(default=False, editable=False)
    state = models.CharField(
        max_length=20, choices=State.choices, default=State.UPLOADED, editable=False
    )
    failure_reason = models.TextField(blank=True, editable=False)
    checksum = models.CharField(max_length=64, blank=True, editable=False)
    rank = models.PositiveIntegerField(null=True, blank=True, editable=False)
    lora_alpha = models.FloatField(null=True, blank=True, editable=False)
    target_modules = models.JSONField(default=list, blank=True, editable=False)
    tenants = models.ManyToManyField("tenants.Tenant", blank=True, related_name="allowed_adapters")
    validated_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "LoRA adapter"

    def __str__(self) -> str:
        return self.name

    @property
    def is_ready(self) -> bool:
        return self.state == self.State.READY
