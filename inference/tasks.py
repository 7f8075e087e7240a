"""Celery tasks of the API layer, found by the worker's autodiscovery (``inference.tasks``)."""

# The batch worker's priority is set by a signal handler there, connected as the worker
# imports this module (before it starts, so before that signal).
import inference.batches.worker_priority  # noqa: F401
from inference.batches.tasks import run_batch

__all__ = ["run_batch"]
