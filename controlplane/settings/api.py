"""Django REST framework, the OpenAPI schema, and defaults of the OpenAI-compatible API."""

import os

from controlplane.settings.env import env

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_PARSER_CLASSES": ["controlplane.common.json_parser.StrictJSONParser"],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "LLM platform API",
    "DESCRIPTION": "OpenAI-compatible inference API and control plane.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # /api/docs/ (Swagger UI) and /api/redoc/ from drf-spectacular-sidecar's files, not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # "Authorize" in Swagger UI takes an API key; "Try it out" sends it as a bearer token.
    "APPEND_COMPONENTS": {
        "securitySchemes": {
            "ApiKey": {
                "type": "http",
                "scheme": "bearer",
                "description": "An API key (sk-...), sent as Authorization: Bearer sk-...",
            }
        }
    },
    "SECURITY": [{"ApiKey": []}],
    "SWAGGER_UI_SETTINGS": {"persistAuthorization": True, "tryItOutEnabled": False},
    # OpenAI's objects have many "type" fields; these name their shared choice sets.
    "ENUM_NAME_OVERRIDES": {
        "FunctionTypeEnum": ["function"],
        "TextFormatTypeEnum": ["text", "json_object", "json_schema"],
        "ListObjectEnum": ["list"],
        "FileObjectEnum": ["file"],
        "BatchObjectEnum": ["batch"],
        "FilePurposeEnum": ["batch", "batch_output"],
        # The management API's fleet objects: a replica's and a node's states.
        "ReplicaStateEnum": "controlplane.fleet.models.Replica.State",
        "NodeStateEnum": "controlplane.fleet.models.Node.State",
        # Reasoning: OpenAI's effort levels (chat's reasoning_effort, Responses' reasoning.effort)
        # and Anthropic's (output_config.effort) differ; a Responses summary's three modes.
        "ReasoningEffortEnum": "inference.reasoning.template.EFFORTS",
        "AnthropicEffortEnum": "inference.messages.serializers.EFFORTS",
        "ReasoningSummaryEnum": ["auto", "concise", "detailed"],
    },
}

# max_tokens of a chat completion that sets none: what the context leaves, but at most this
# many, so that a model that never says EOS answers in the time a person waits.
CHAT_DEFAULT_MAX_TOKENS = env.int("CHAT_DEFAULT_MAX_TOKENS", 512)
# The same for a Responses request that sets no max_output_tokens; 0: what the context leaves,
# as OpenAI does. Agent frameworks (the OpenAI Agents SDK) take a response cut short
# ("incomplete") for a failure, so a cap here breaks agents whose answers run long.
RESPONSES_DEFAULT_MAX_OUTPUT_TOKENS = env.int("RESPONSES_DEFAULT_MAX_OUTPUT_TOKENS", 0)

# Limits that keep one request from stalling an API process (docs/api.md, "Limits").
# The largest body the JSON API reads (/v1/..., /tokenize, /detokenize): bigger ones get a 413
# before Django reads them (inference/body_limit.py). The admin's adapter upload is not under
# it: its files stream to disk under ADAPTER_MAX_BYTES.
API_MAX_REQUEST_BYTES = env.int("API_MAX_REQUEST_BYTES", 4 * 1024 * 1024)
# Django refuses request data (not files) over this; the API's bodies must fit under it.
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_REQUEST_BYTES
# Engine sequences one request may start: prompts x n (a 400 beyond).
API_MAX_SEQUENCES_PER_REQUEST = env.int("API_MAX_SEQUENCES_PER_REQUEST", 256)
# A generous bound on the characters one token covers (English text averages about 4): a
# prompt longer than max_model_len x this cannot fit, and is refused before it is tokenized.
PROMPT_MAX_CHARS_PER_TOKEN = env.int("PROMPT_MAX_CHARS_PER_TOKEN", 32)
# Threads that render chat templates and tokenize, off the event loop: half the cores (at
# most 4), so that the event loop keeps a core however many long prompts arrive at once.
API_TOKENIZER_THREADS = env.int("API_TOKENIZER_THREADS", max(1, min(4, (os.cpu_count() or 2) // 2)))
# Per-tenant lanes at the API's door (controlplane/common/tenant_lanes.py): at most this many
# requests of one tenant do their work before the engine at once, each for at most the lease.
API_LANE_WIDTH = env.int("API_LANE_WIDTH", 4)
API_LANE_LEASE_S = env.float("API_LANE_LEASE_S", 0.25)

# Daphne processes `manage.py serve` runs on the API port (each on its own SO_REUSEPORT socket;
# controlplane/launcher/api_sockets.py). One process streams at most one core's worth of
# tokens (10,000-22,000 tokens/s on the 2-core VMs measured); a host whose engines produce
# more raises it. On a 2-core host a second one only takes CPU from the engine.
API_PROCESSES = env.int("API_PROCESSES", 1)
