"""Chat completions made with ``store: true``, kept for OpenAI's stored-completion endpoints
(``GET /v1/chat/completions`` and ``/v1/chat/completions/{id}``)."""

from django.db import models


class StoredChatCompletion(models.Model):
    """One finished chat completion, owned by the tenant that made it.

    ``completion`` is the ``chat.completion`` object the client received (a streamed one as
    the same request unstreamed would have answered); ``messages`` are the request's messages
    as sent, each with the id the messages endpoint lists it under.
    """

    id = models.CharField(max_length=64, primary_key=True)  # "chatcmpl-..."
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="stored_chat_completions"
    )
    key_prefix = models.CharField(max_length=32, blank=True)
    model = models.CharField(max_length=200)
    metadata = models.JSONField(default=dict)
    messages = models.JSONField(default=list)
    completion = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["tenant", "created_at", "id"])]

    def __str__(self) -> str:
        return self.id
