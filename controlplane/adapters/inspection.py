"""Reading an adapter's files against its base model (the Celery worker's validation step):
the engine's own checks, so what validates here is what engines load."""

from __future__ import annotations

import logging

from django.conf import settings

from controlplane.adapters.models import Adapter

logger = logging.getLogger(__name__)


def max_lora_rank() -> int:
    """The engines' max_lora_rank: adapters above it could never be loaded."""
    return int(getattr(settings, "ENGINE_MAX_LORA_RANK", 64))


def adapter_inspect(adapter: Adapter):
    """The AdapterSpec, or a readable failure reason."""
    # Imported here: the worker may load engine code, API processes never import this path.
    from engine.lora.shapes import BaseModelShape
    from engine.lora.validation import inspect_adapter

    try:
        base = BaseModelShape.from_pretrained(adapter.base_model.path)
    except ValueError as exc:
        return f"base model {adapter.base_model.name}: {exc}"
    try:
        return inspect_adapter(adapter.path, base, max_lora_rank=max_lora_rank())
    except ValueError as exc:  # AdapterError is a ValueError
        return str(exc)
    except OSError as exc:
        return f"could not read the adapter files: {exc}"
    except Exception as exc:
        logger.exception("validating adapter %s failed unexpectedly", adapter.name)
        return f"unexpected error while validating: {exc}"
