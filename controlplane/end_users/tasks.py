"""Celery task: make Redis's copy of every tenant's end-user controls match the rows again."""

from celery import shared_task

from controlplane.end_users.services import end_user_controls_heal


@shared_task(name="end_users.heal_controls", ignore_result=True)
def heal_end_user_controls() -> int:
    return end_user_controls_heal()
