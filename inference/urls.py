"""Routes of the OpenAI-compatible API, Anthropic's Messages API, vLLM's extensions, rerank
(Cohere's v1 and v2 paths), health checks and the playground."""

from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

from controlplane.common.api_error import ApiError
from inference.chat_store.views import ChatCompletionDetailView, ChatCompletionMessagesView
from inference.conversations.views import (
    ConversationDetailView,
    ConversationItemDetailView,
    ConversationItemsView,
    ConversationsView,
)
from inference.errors import error_response
from inference.messages.batch_views import (
    MessageBatchCancelView,
    MessageBatchDetailView,
    MessageBatchesView,
    MessageBatchResultsView,
)
from inference.messages.views import CountTokensView, MessagesView
from inference.responses.views import (
    ResponseCancelView,
    ResponseDetailView,
    ResponseInputItemsView,
    ResponseInputTokensView,
    ResponsesView,
)
from inference.views import health, playground
from inference.views.batches import BatchCancelView, BatchDetailView, BatchListView
from inference.views.embeddings import EmbeddingsView
from inference.views.end_users import EndUserDetailView, EndUserListView
from inference.views.files import FileContentView, FileDetailView, FileListView
from inference.views.generation import ChatCompletionsView, CompletionsView
from inference.views.models import ModelDetailView, ModelListView
from inference.views.scoring import RerankV2View, RerankView, ScoreView
from inference.views.tokenize import DetokenizeView, TokenizeView


async def unknown_api_path(request):
    """OpenAI's answer for a path it does not serve: a JSON 404, never an HTML page."""
    message = f"Invalid URL ({request.method} {request.path})"
    return error_response(ApiError(message, status=404))


urlpatterns = [
    path("health", health.health, name="health"),
    path("ready", health.ready, name="ready"),
    path("v1/models", ModelListView.as_view(), name="models"),
    path("v1/models/<path:model_id>", ModelDetailView.as_view(), name="model-detail"),
    path("v1/chat/completions", ChatCompletionsView.as_view(), name="chat-completions"),
    path(
        "v1/chat/completions/<str:completion_id>",
        ChatCompletionDetailView.as_view(),
        name="chat-completion-detail",
    ),
    path(
        "v1/chat/completions/<str:completion_id>/messages",
        ChatCompletionMessagesView.as_view(),
        name="chat-completion-messages",
    ),
    path("v1/completions", CompletionsView.as_view(), name="completions"),
    path("v1/embeddings", EmbeddingsView.as_view(), name="embeddings"),
    path("v1/rerank", RerankView.as_view(), name="rerank"),
    path("v2/rerank", RerankV2View.as_view(), name="rerank-v2"),
    path("v1/score", ScoreView.as_view(), name="score"),
    path("v1/responses", ResponsesView.as_view(), name="responses"),
    path(
        "v1/responses/input_tokens",
        ResponseInputTokensView.as_view(),
        name="response-input-tokens",
    ),
    path("v1/responses/<str:response_id>", ResponseDetailView.as_view(), name="response-detail"),
    path(
        "v1/responses/<str:response_id>/cancel",
        ResponseCancelView.as_view(),
        name="response-cancel",
    ),
    path(
        "v1/responses/<str:response_id>/input_items",
        ResponseInputItemsView.as_view(),
        name="response-input-items",
    ),
    path("v1/conversations", ConversationsView.as_view(), name="conversations"),
    path(
        "v1/conversations/<str:conversation_id>",
        ConversationDetailView.as_view(),
        name="conversation-detail",
    ),
    path(
        "v1/conversations/<str:conversation_id>/items",
        ConversationItemsView.as_view(),
        name="conversation-items",
    ),
    path(
        "v1/conversations/<str:conversation_id>/items/<str:item_id>",
        ConversationItemDetailView.as_view(),
        name="conversation-item-detail",
    ),
    path("v1/messages", MessagesView.as_view(), name="messages"),
    path("v1/messages/count_tokens", CountTokensView.as_view(), name="messages-count-tokens"),
    path("v1/messages/batches", MessageBatchesView.as_view(), name="message-batches"),
    path(
        "v1/messages/batches/<str:batch_id>",
        MessageBatchDetailView.as_view(),
        name="message-batch-detail",
    ),
    path(
        "v1/messages/batches/<str:batch_id>/cancel",
        MessageBatchCancelView.as_view(),
        name="message-batch-cancel",
    ),
    path(
        "v1/messages/batches/<str:batch_id>/results",
        MessageBatchResultsView.as_view(),
        name="message-batch-results",
    ),
    path("v1/files", FileListView.as_view(), name="files"),
    path("v1/files/<str:file_id>", FileDetailView.as_view(), name="file-detail"),
    path("v1/files/<str:file_id>/content", FileContentView.as_view(), name="file-content"),
    path("v1/end_users", EndUserListView.as_view(), name="end-users"),
    # The name is the client's text: anything, slashes too (URL-encoded in the path).
    path("v1/end_users/<path:name>", EndUserDetailView.as_view(), name="end-user-detail"),
    path("v1/batches", BatchListView.as_view(), name="batches"),
    path("v1/batches/<str:batch_id>", BatchDetailView.as_view(), name="batch-detail"),
    path("v1/batches/<str:batch_id>/cancel", BatchCancelView.as_view(), name="batch-cancel"),
    path("tokenize", TokenizeView.as_view(), name="tokenize"),
    path("detokenize", DetokenizeView.as_view(), name="detokenize"),
    path("playground/", playground.playground, name="playground"),
    path("static/<path:path>", playground.static_asset, name="static-asset"),
    path("favicon.ico", playground.favicon, name="favicon"),
    # Last: any other /v1 path answers like OpenAI, in JSON, whatever the method.
    # [\s\S], not ".": a path with an encoded newline (/v1/models/a%0Ab) must not fall
    # through to Django's HTML 404.
    re_path(r"^v1(?:/[\s\S]*)?\Z", csrf_exempt(unknown_api_path), name="unknown-api-path"),
]
