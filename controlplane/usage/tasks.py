"""Celery task: drain queued usage into the database (scheduled every few seconds by beat)."""

from celery import shared_task

from controlplane.usage.services import usage_flush


@shared_task(name="usage.flush", ignore_result=True)
def flush_usage() -> int:
    return usage_flush()
