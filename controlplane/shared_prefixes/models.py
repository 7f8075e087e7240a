"""A shared prefix: text or chat messages (and tools) an operator declares public, versioned."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from controlplane.deployments.models import ServedModel

MESSAGE_ROLES = ("system", "developer", "user", "assistant", "tool")


class SharedPrefix(models.Model):
    """One version of a declared prefix. A request whose prompt, as tokens after templating,
    starts with it has that prefix's whole KV blocks cached under a public salt the API derives
    from (name, version, model, content); everything after it stays under the tenant's salt.

    ``kind`` "chat": ``messages`` (and ``tools``) rendered by each model's chat template, as a
    chat request with the same leading messages and tools renders them. ``kind`` "text": the
    prompt text itself, as /v1/completions sends it (with the tokenizer's special tokens or
    without). A new version is a new row; requests match every active version.
    """

    class Kind(models.TextChoices):
        CHAT = "chat", "chat messages (and tools)"
        TEXT = "text", "prompt text"

    name = models.CharField(
        max_length=100,
        validators=[RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", "letters, digits, . _ -")],
    )
    version = models.PositiveIntegerField(default=1)
    description = models.CharField(max_length=300, blank=True, default="")
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.CHAT)
    text = models.TextField(blank=True, default="", help_text="For kind 'text'.")
    messages = models.JSONField(
        default=list,
        blank=True,
        help_text='For kind "chat": the leading messages, e.g. '
        '[{"role": "system", "content": "You are ..."}].',
    )
    tools = models.JSONField(
        default=list,
        blank=True,
        help_text="For kind 'chat': the tools list, as requests send it (empty: no tools).",
    )
    served_models = models.ManyToManyField(
        ServedModel,
        blank=True,
        related_name="shared_prefixes",
        help_text="The models it applies to; none selected: every served model.",
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="shared_prefix_name_version")
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"

    def clean(self) -> None:
        if self.kind == self.Kind.TEXT:
            if not self.text:
                raise ValidationError({"text": "A text prefix needs its text."})
            if self.messages or self.tools:
                raise ValidationError("A text prefix has no messages or tools.")
            return
        if self.text:
            raise ValidationError({"text": "A chat prefix has messages, not text."})
        _check_messages(self.messages)
        _check_tools(self.tools)


def _check_messages(messages) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValidationError({"messages": "A chat prefix needs a list of messages."})
    for i, message in enumerate(messages):
        if (
            not isinstance(message, dict)
            or message.get("role") not in MESSAGE_ROLES
            or not isinstance(message.get("content"), str)
            or set(message) - {"role", "content", "name"}
        ):
            raise ValidationError(
                {
                    "messages": f"Message {i} must be {{'role': one of {MESSAGE_ROLES}, "
                    "'content': text}."
                }
            )


def _check_tools(tools) -> None:
    if not isinstance(tools, list):
        raise ValidationError({"tools": "Tools must be a list."})
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(function, dict)
            or tool.get("type") != "function"
            or not isinstance(function.get("name"), str)
        ):
            raise ValidationError(
                {"tools": f"Tool {i} must be {{'type': 'function', 'function': {{'name': ...}}}}."}
            )
