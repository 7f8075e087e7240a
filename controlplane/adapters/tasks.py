"""Celery tasks: validate an adapter against its base model (see services.adapter_validate),
and, on beat, rewrite the engines' adapter registry from the database."""

from celery import shared_task


@shared_task(name="adapters.validate", ignore_result=True)
def validate_adapter(adapter_id: int) -> str | None:
    from controlplane.adapters.services import adapter_validate

    adapter = adapter_validate(adapter_id=adapter_id)
    return None if adapter is None else adapter.state


@shared_task(name="adapters.reconcile_registry", ignore_result=True)
def reconcile_adapter_registry() -> int:
    from controlplane.adapters.engine_sync import registry_reconcile

    return registry_reconcile()
