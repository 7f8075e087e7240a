"""Which environment variable the platform's settings take the /metrics bearer token from."""

from __future__ import annotations

import importlib
import os
from unittest import mock


def platform_reads_metrics_token_from(variable: str) -> bool:
    """Whether setting ``variable`` sets METRICS_BEARER_TOKEN in controlplane.settings."""
    from controlplane.settings import metrics

    try:
        with mock.patch.dict(os.environ, {variable: "token-from-the-environment"}):
            return importlib.reload(metrics).METRICS_BEARER_TOKEN == "token-from-the-environment"
    finally:
        importlib.reload(metrics)  # the module as this process's environment makes it
