"""Routes of the OpenAI-compatible API, vLLM's extensions, health checks and the playground."""

from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

from controlplane.core.api_error import ApiError
from inference.errors import error_response
from inference.views import health, playground
from inference.views.embeddings import EmbeddingsView
from inference.views.generation import ChatCompletionsView, CompletionsView
from inference.views.models import ModelDetailView, ModelListView
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
    path("v1/completions", CompletionsView.as_view(), name="completions"),
    path("v1/embeddings", EmbeddingsView.as_view(), name="embeddings"),
    path("tokenize", TokenizeView.as_view(), name="tokenize"),
    path("detokenize", DetokenizeView.as_view(), name="detokenize"),
    path("playground/", playground.playground, name="playground"),
    path("static/<path:path>", playground.static_asset, name="static-asset"),
    # Last: any other /v1 path answers like OpenAI, in JSON, whatever the method.
    re_path(r"^v1(?:/.*)?$", csrf_exempt(unknown_api_path), name="unknown-api-path"),
]
