"""This month's spend per tenant, per key and per end user, mirrored in Redis for admission.

The usage flush writes each counter as the absolute total of the month (from the monthly
and daily rollups, never an increment), so a counter is exact after every flush and heals itself after
Redis loses it. Admission (controlplane/access/ratelimit.py) refuses a request once a counter
reaches its budget, in the same round trip as the rate limits.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, date, datetime

from controlplane.common.redis_clients import redis_key

# Counters outlive their month by a little, then Redis forgets them.
COUNTER_TTL_S = 40 * 86400


def month_tag(day: date | datetime | None = None) -> str:
    day = day or datetime.now(UTC)
    return f"{day.year:04d}{day.month:02d}"


def tenant_spend_key(tenant_id: int, month: str | None = None) -> str:
    return redis_key("spend", tenant_id, "tenant", month or month_tag())


def key_spend_key(tenant_id: int, key_prefix: str, month: str | None = None) -> str:
    return redis_key("spend", tenant_id, "key", key_prefix, month or month_tag())


def end_user_spend_key(tenant_id: int, end_user: str, month: str | None = None) -> str:
    """An end user's spend counter. The name is hashed: it is the client's text, any length."""
    digest = hashlib.sha256(end_user.encode()).hexdigest()[:32]
    return redis_key("spend", tenant_id, "user", digest, month or month_tag())
