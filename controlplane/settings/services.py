"""Redis, Celery, Channels and the engine fleet's shared names."""

from controlplane.common.platform_location import find_running_platform
from controlplane.settings.batches import BATCH_REQUEUE_INTERVAL
from controlplane.settings.core import VAR_DIR
from controlplane.settings.env import env

# Only tests change it: they cannot own port 6379.
DEFAULT_REDIS_URL = env.str("PLATFORM_DEFAULT_REDIS_URL", "redis://127.0.0.1:6379/0")


def _redis_url() -> tuple[str, str]:
    """REDIS_URL; else the Redis of the `manage.py serve` running from this var dir (commands
    typed in a second shell must reach it, not whatever listens on 6379); else the default."""
    if url := env.str("REDIS_URL", ""):
        return url, "environment"
    running = find_running_platform(VAR_DIR)
    if running is not None:
        return running.redis_url, "serve"
    return DEFAULT_REDIS_URL, "default"


# Where it came from: "environment", "serve" (VAR_DIR/run/redis.json) or "default".
REDIS_URL, REDIS_URL_SOURCE = _redis_url()
# Every key the platform writes starts with this, so deployments can share one Redis.
PLATFORM_REDIS_PREFIX = env.str("PLATFORM_REDIS_PREFIX", "llmp")

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", REDIS_URL)
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_ACKS_LATE = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Websocket consumers do not talk to each other, so no cross-process channel layer is needed.
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": PLATFORM_REDIS_PREFIX + ":cache",
    }
}

# How long an API process waits for the engine's next output before it reports the engine
# as silent (seconds).
ENGINE_SILENCE_TIMEOUT = env.float("ENGINE_SILENCE_TIMEOUT", 30.0)
# Requests waiting for a model above which new ones are refused with 503.
ENGINE_MAX_WAITING = env.int("ENGINE_MAX_WAITING", 1024)
# Cache-aware routing (inference/transport/prefix_router.py): with two replicas of a model or
# more, a request whose prompt prefix one of them holds cached goes to that one when it is
# clearly better than the shared stream. Off: every request goes through the shared stream.
PREFIX_ROUTING = env.bool("PREFIX_ROUTING", True)
# Per model, tenant and service class, the API processes (and batch workers) sending to a model
# of fair engines keep at most this many requests per engine sent and not started, each its
# share (at least 8); the next wait in the API process, in order, so that one tenant's burst is
# never deeper in a model's stream than the engines read ahead (their fair look-ahead:
# inference/transport/tenant_backlog.py). 0: no bound.
TENANT_QUEUED_PER_ENGINE = env.int("TENANT_QUEUED_PER_ENGINE", 64)
# Load on demand: how long a request for a scale-to-zero model with no live engine waits for
# one to start (seconds; 0 turns load on demand off: such requests get 503 at once, and
# requests still record the last use that idle unload goes by). Long
# enough for a small model to load, and below the openai SDK's 600 s default timeout.
FLEET_WAKE_TIMEOUT_S = env.float("FLEET_WAKE_TIMEOUT_S", 300.0)

# Usage events queue in Redis on the request path; this drains them into the database. The
# engines' adapter registry is rewritten from the database, so a lost write heals in a beat.
CELERY_BEAT_SCHEDULE = {
    "usage-flush": {"task": "usage.flush", "schedule": 5.0},
    "adapters-reconcile-registry": {"task": "adapters.reconcile_registry", "schedule": 10.0},
    # Batches whose worker died (lease run out) go back on the batch queue.
    "batches-requeue-stale": {"task": "batches.requeue_stale", "schedule": BATCH_REQUEUE_INTERVAL},
    # Stored responses and chat completions past their retention are deleted.
    "stored-purge-expired": {"task": "stored.purge_expired", "schedule": 3600.0},
    # The end-user controls admission reads from Redis come back within a minute if lost.
    "end-users-heal-controls": {"task": "end_users.heal_controls", "schedule": 60.0},
}
# How long stored responses (Responses API) and stored chat completions (store: true) are
# kept, in days; OpenAI keeps both 30 days. 0 keeps them until a client deletes them.
STORED_OBJECT_RETENTION_DAYS = env.int("STORED_OBJECT_RETENTION_DAYS", 30)

# Registering a Hugging Face hub id downloads it from here (a mirror, when set) with this
# token (gated and private repos); huggingface_hub's own variable names.
HF_ENDPOINT = env.str("HF_ENDPOINT", "https://huggingface.co")
HF_TOKEN = env.str("HF_TOKEN", "")

# Spend (controlplane/billing): the currency prices and budgets are in, and the percentages
# of a monthly spend budget at which an alert fires (once each per budget and month).
BILLING_CURRENCY = env.str("BILLING_CURRENCY", "USD")
BUDGET_ALERT_THRESHOLDS = tuple(env.list("BUDGET_ALERT_THRESHOLDS", cast=int, default=[80, 100]))
