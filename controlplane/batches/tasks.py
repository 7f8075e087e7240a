"""Celery beat task: batches whose worker died go back on the batch queue. (The task that runs
a batch, ``batches.run``, lives in inference/batches: it runs lines through the API's use case.)"""

from celery import shared_task


@shared_task(name="batches.requeue_stale", ignore_result=True)
def requeue_stale_batches() -> int:
    from controlplane.batches.services import batch_requeue_stale

    return len(batch_requeue_stale())
