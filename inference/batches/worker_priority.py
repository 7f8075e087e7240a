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

Linux shares the CPU between autogroups (one per session) before nice applies inside one, and
the platform's launcher starts each process in a session of its own, so a worker that leads
its session lowers its autogroup's priority as well as its own. ``BATCH_WORKER_NICE`` (default 10) sets how far; 0
leaves both alone. Only a worker that consumes the ``batches`` queue alone does this: one that
also runs the platform's other tasks keeps their priority.
"""

from __future__ import annotations

import logging
import os

from celery.signals import celeryd_after_setup

logger = logging.getLogger(__name__)

BATCH_QUEUE = "batches"  # settings.CELERY_TASK_ROUTES sends batches.run there
AUTOGROUP = "/proc/self/autogroup"


def lower_priority(nice: int, autogroup: str = AUTOGROUP) -> list[str]:
    """Raise this process's nice value, and its autogroup's, to at least ``nice`` (a process
    may lower its own priority without privileges). Threads started afterwards inherit it.
    Returns what was changed, for the log; what this system does not offer is skipped."""
    changed = []
    if nice <= 0:
        return changed
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current < nice:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        changed.append(f"nice {current} -> {nice}")
    if os.getsid(0) != os.getpid():
        # The autogroup is the session's, shared with whatever started this worker (a shell,
        # a test run): not this worker's to lower.
        logger.debug("autogroup priority unchanged: this worker does not lead its session")
        return changed
    try:
        with open(autogroup, "w") as f:
            f.write(str(nice))
        changed.append(f"autogroup nice {nice}")
    except OSError as exc:  # no autogroups (kernel option off, or not Linux), or refused
        logger.debug("autogroup priority unchanged: %s", exc)
    return changed


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
