"""WebSocket routes (Channels)."""

from django.urls import path

from inference.consumers import GenerationConsumer

websocket_urlpatterns: list = [
    path("v1/ws", GenerationConsumer.as_asgi()),
]
