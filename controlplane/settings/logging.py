"""Logging: one line per record to stderr, level from the environment."""

from controlplane.settings.env import env

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "filters": {"not_ready_probes": {"()": "controlplane.common.log_filters.NotReadyProbes"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["stderr"], "level": env.str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "django.request": {"filters": ["not_ready_probes"]},
    },
}
