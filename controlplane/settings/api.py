"""Django REST framework, the OpenAPI schema, and defaults of the OpenAI-compatible API."""

from controlplane.settings.env import env_int

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "LLM platform API",
    "DESCRIPTION": "OpenAI-compatible inference API and control plane.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
}

# max_tokens of a chat completion that sets none: what the context leaves, but at most this
# many, so that a model that never says EOS answers in the time a person waits.
CHAT_DEFAULT_MAX_TOKENS = env_int("CHAT_DEFAULT_MAX_TOKENS", 512)
