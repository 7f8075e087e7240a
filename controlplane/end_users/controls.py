"""A tenant's end-user controls as admission reads them: one Redis hash per tenant, end user
name -> "budget_units blocked" (budget -1: the tenant's budget per end user applies).

Admission reads a request's end user from it in the rate limiter's round trip
(controlplane/access/ratelimit.py), so no request waits on the database for it. The hash is
a copy of the EndUser rows: written field by field after each change commits, and compared
with the rows every minute by ``end_user_controls_heal`` (a beat task), which rewrites a
tenant's hash Redis lost or missed a change of.
"""

from __future__ import annotations

from decimal import Decimal

from controlplane.billing.money import amount_to_units
from controlplane.common.redis_clients import redis_key


def controls_key(tenant_id: int) -> str:
    return redis_key("end_users", tenant_id, "controls")


def controls_value(*, monthly_spend_budget: Decimal | None, blocked: bool) -> str:
    budget = -1 if monthly_spend_budget is None else amount_to_units(monthly_spend_budget)
    return f"{budget} {1 if blocked else 0}"
