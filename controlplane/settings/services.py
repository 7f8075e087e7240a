"""Redis, Celery, Channels and the engine fleet's shared names."""

from controlplane.settings.env import env_float, env_int, env_str

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
# Every key the platform writes starts with this, so deployments can share one Redis.
PLATFORM_REDIS_PREFIX = env_str("PLATFORM_REDIS_PREFIX", "llmp")

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", REDIS_URL)
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
ENGINE_SILENCE_TIMEOUT = env_float("ENGINE_SILENCE_TIMEOUT", 30.0)
# Requests waiting for a model above which new ones are refused with 503.
ENGINE_MAX_WAITING = env_int("ENGINE_MAX_WAITING", 1024)

# Usage events queue in Redis on the request path; this drains them into the database.
CELERY_BEAT_SCHEDULE = {"usage-flush": {"task": "usage.flush", "schedule": 5.0}}
