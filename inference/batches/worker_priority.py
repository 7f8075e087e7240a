"""The Batch API's worker gives the CPU to live traffic first.

Batch lines already come after interactive requests in the engines (the ``batch`` service
class), but the worker that feeds them takes CPU of its own: validating, tokenizing and
submitting each line, reading its tokens back, writing results. Where it shares a host with
the API and the engine, as ``bin/serve`` runs everything on one machine, that CPU comes out of
the interactive requests' time. Measured on a 2-core VM (bench/batch_interference.py
--batch-lines 4000 --batch-max-tokens 32, 2026-11-26): the worker used about half a core while
the batch ran and interactive TTFT p50 was 1.6-1.9x its idle value; with the worker at nice
10, 1.31-1.45x, and the batch finished as fast (21.8-22.0 s against 21.6-21.9 s), since it
still takes whatever CPU live traffic leaves.

How the priority is lowered (the process and its autogroup) is engine/process_priority.py's,
which the engine uses too. ``BATCH_WORKER_NICE`` (default 10) sets how far; 0 leaves both
alone. Only a worker that consumes the ``batches`` queue alone does this: one that also runs
the platform's other tasks keeps their priority.
"""

from __future__ import annotations

import logging

from celery.signals import celeryd_after_setup

from engine.process_priority import lower_priority

logger = logging.getLogger(__name__)

BATCH_QUEUE = "batches"  # settings.CELERY_TASK_ROUTES sends batches.run there


@celeryd_after_setup.connect
def _batch_worker_yields(sender, instance, **kwargs) -> None:
    from django.conf import settings

    queues = set(instance.app.amqp.queues.consume_from or ())
    if queues != {BATCH_QUEUE}:
        return
    changed = lower_priority(settings.BATCH_WORKER_NICE)
    if changed:
        logger.info(
            "batch worker %s yields the CPU to live traffic: %s", sender, ", ".join(changed)
        )
