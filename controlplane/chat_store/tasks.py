"""Celery task: delete stored responses and chat completions past their retention."""

from celery import shared_task

from controlplane.chat_store.retention import purge_expired


@shared_task(name="stored.purge_expired", ignore_result=True)
def purge_expired_stored_objects() -> int:
    return purge_expired()
