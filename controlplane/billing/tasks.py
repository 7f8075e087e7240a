"""Celery task: deliver a budget alert to the tenant's webhook, retried with back-off."""

from __future__ import annotations

import logging

from celery import shared_task

logger = logging.getLogger(__name__)

MAX_RETRIES = 6  # back-off 2, 4, ... 64 s: about two minutes of an unreachable receiver


@shared_task(
    bind=True,
    name="billing.post_budget_alert",
    ignore_result=True,
    max_retries=MAX_RETRIES,
    acks_late=True,
)
def post_budget_alert(self, alert_id: int) -> str:
    from controlplane.billing.models import BudgetAlert
    from controlplane.billing.webhooks import alert_payload, post_json

    alert = BudgetAlert.objects.select_related("tenant").filter(pk=alert_id).first()
    url = alert.tenant.budget_alert_webhook_url if alert is not None else ""
    if not url:
        return "skipped"
    try:
        post_json(url, alert_payload(alert))
    except Exception as exc:
        if self.request.retries >= MAX_RETRIES:
            logger.warning("budget alert %s not delivered to %s: %s", alert_id, url, exc)
            BudgetAlert.objects.filter(pk=alert_id).update(webhook_state="failed")
            return "failed"
        raise self.retry(exc=exc, countdown=2 ** (self.request.retries + 1)) from exc
    BudgetAlert.objects.filter(pk=alert_id).update(webhook_state="sent")
    return "sent"
