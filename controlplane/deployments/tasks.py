"""Celery task: register a model in the background (see registration.served_model_registration_run)."""

from celery import shared_task


@shared_task(name="deployments.register", ignore_result=True)
def register_model(model_id: int) -> str | None:
    from controlplane.deployments.registration import served_model_registration_run

    model = served_model_registration_run(model_id=model_id)
    return None if model is None else model.state
