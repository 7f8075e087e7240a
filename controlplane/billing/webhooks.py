"""What a budget alert's webhook receives (JSON, POSTed by ``billing.post_budget_alert``)."""

from __future__ import annotations

import json
import urllib.request

from controlplane.billing.models import BudgetAlert
from controlplane.billing.money import amount_text, currency

TIMEOUT_S = 10


def alert_payload(alert: BudgetAlert) -> dict:
    return {
        "type": "budget.threshold_reached",
        "tenant": alert.tenant.name,
        "api_key_prefix": alert.key_prefix or None,  # None: the tenant's own budget
        "end_user": alert.end_user or None,  # set: an end user's budget
        "period": alert.period.strftime("%Y-%m"),
        "threshold_percent": alert.threshold,
        "spent": amount_text(alert.spent_units),
        "monthly_budget": str(alert.budget),
        "currency": currency(),
        "created_at": alert.created_at.isoformat(),
    }


def post_json(url: str, payload: dict) -> int:
    """POST ``payload``; returns the HTTP status (raises on network errors and non-2xx).
    Only http and https: urllib would also open file: and ftp: addresses."""
    if not url.lower().startswith(("http://", "https://")):
        raise ValueError(f"a budget alert webhook is an http(s) URL, not {url!r}")
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "llm-platform-billing"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        return response.status
