"""Responses API objects kept for ``GET /v1/responses/{id}`` and ``previous_response_id``."""

from django.db import models


class StoredResponse(models.Model):
    """One finished response of the Responses API, owned by the tenant that made it.

    ``response`` is the object exactly as the client received it; ``input_items`` is the whole
    conversation the response answered (the previous response's input and output first, then
    this request's input), so continuing it never walks a chain of rows.
    """

    id = models.CharField(max_length=64, primary_key=True)  # "resp_..."
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="stored_responses"
    )
    key_prefix = models.CharField(max_length=32, blank=True)
    model = models.CharField(max_length=200)
    status = models.CharField(max_length=16)
    previous_response_id = models.CharField(max_length=64, blank=True)
    instructions = models.TextField(null=True, blank=True)
    input_items = models.JSONField(default=list)
    response = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # ``background: true``: the API process running it writes ``heartbeat_at`` every few
    # seconds until it finishes; one stale while still running means that process stopped.
    background = models.BooleanField(default=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "created_at"])]

    def __str__(self) -> str:
        return self.id


class Conversation(models.Model):
    """A conversation of the Conversations API: items a tenant keeps on the server, which
    Responses requests naming it read as their history and add their input and output to."""

    id = models.CharField(max_length=64, primary_key=True)  # "conv_..."
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="conversations"
    )
    key_prefix = models.CharField(max_length=32, blank=True)
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["tenant", "created_at"])]

    def __str__(self) -> str:
        return self.id


class ConversationItem(models.Model):
    """One item of a conversation (a message, a function call or its output, a reasoning
    item), as the Responses API's input items are, at ``position`` in its order."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    item_id = models.CharField(max_length=64)
    item = models.JSONField(default=dict)

    class Meta:
        ordering = ["conversation", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "position"], name="conversation_item_position"
            )
        ]
        indexes = [models.Index(fields=["conversation", "item_id"])]

    def __str__(self) -> str:
        return self.item_id
