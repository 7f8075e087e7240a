"""Celery task: validate an adapter against its base model (see services.adapter_validate)."""

from celery import shared_task


@shared_task(name="adapters.validate", ignore_result=True)
def validate_adapter(adapter_id: int) -> str | None:
    from controlplane.adapters.services import adapter_validate

    adapter = adapter_validate(adapter_id=adapter_id)
    return None if adapter is None else adapter.state
