"""Celery tasks of the API layer, found by the worker's autodiscovery (``inference.tasks``)."""

from inference.batches.tasks import run_batch

__all__ = ["run_batch"]
