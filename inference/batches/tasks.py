"""The Celery task that runs a batch (queue ``batches``; its own worker, see docs/batches.md).

acks_late and reject_on_worker_lost: a task whose worker died is not acknowledged, so the
broker delivers it again; beat's ``batches.requeue_stale`` sends it sooner, once the dead
worker's lease has run out. Either way the new run resumes after the last written line.
"""

from __future__ import annotations

import asyncio

from celery import shared_task
from django.db import close_old_connections

from controlplane.access.admission import finish_pending
from inference.batches.runner import BatchRun


async def _run(batch_id: str) -> str:
    from inference.transport import EmbeddingsClient, EngineClient

    try:
        return await BatchRun(batch_id).run()
    finally:
        await finish_pending()  # usage of the last lines reaches Redis before the loop ends
        loop = asyncio.get_running_loop()
        for client_class in (EngineClient, EmbeddingsClient):
            entry = client_class._instances.pop(id(loop), None)
            if entry is not None and hasattr(entry[1], "close"):
                await entry[1].close()


@shared_task(name="batches.run", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_batch(batch_id: str) -> str:
    close_old_connections()
    try:
        return asyncio.run(_run(batch_id))
    finally:
        close_old_connections()
