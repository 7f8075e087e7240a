"""Routes of the OpenAI-compatible API, vLLM's extensions, health checks and the playground."""

from django.urls import path

from inference.views import health, playground
from inference.views.embeddings import EmbeddingsView
from inference.views.generation import ChatCompletionsView, CompletionsView
from inference.views.models import ModelDetailView, ModelListView
from inference.views.tokenize import DetokenizeView, TokenizeView

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
]
