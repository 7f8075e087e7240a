"""Django REST framework and the OpenAPI schema."""

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
