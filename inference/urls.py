"""Routes of the OpenAI-compatible API and the health checks."""

from django.urls import path

from inference.views import health

urlpatterns = [
    path("health", health.health, name="health"),
]
