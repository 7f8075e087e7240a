"""Failed API-key authentication, counted per client address and key prefix in Redis.

Guessing keys must neither cost the database a query per guess nor go on unanswered (admin
passwords are django-axes' work: login_lockout.py). Each failure is counted against its
subjects (``addr:<ip>``, ``prefix:<sk-...>``) in fixed windows: a subject that reached its
limit stays blocked for a whole window after its last counted failure (a failure while blocked starts it again). One
Lua script checks and counts every subject of an attempt in one round trip, so API processes
sharing Redis agree. Redis errors let the attempt through: authentication keeps working while
Redis is away, as the key cache does.

The API's rules (``api_auth_throttle``): after ``AUTH_FAILURES_PER_ADDRESS`` failures from one
address (default 20) or ``AUTH_FAILURES_PER_KEY_PREFIX`` with one key prefix (default 10) within
``AUTH_FAILURE_WINDOW_SECONDS`` (default 60), failures are answered 429 with Retry-After, and a
blocked address is refused before any key lookup that would reach the database. A key the
process already holds is accepted without asking Redis, from any address: its secret was
verified, and many clients can share one address behind NAT. A prefix is public (it is in
lists and logs), so it is never refused before its secret is checked: anyone could otherwise
lock a key's owner out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings

from controlplane.common.redis_clients import async_redis, redis_key, sync_redis

logger = logging.getLogger(__name__)

__all__ = ["FailureCounter", "api_auth_throttle"]

# KEYS: one failure counter per subject
# ARGV: limit per subject (in KEYS' order), window_ms, count (1: count this attempt as failed)
# Returns the milliseconds until every subject this attempt hit is unblocked (0: not blocked).
_FAILURES_LUA = """
local n_keys = #KEYS
local window, count = tonumber(ARGV[n_keys + 1]), ARGV[n_keys + 2] == '1'
local retry = 0
for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[i])
  local blocked = tonumber(redis.call('GET', key) or '0') >= limit
  if count then
    local n = redis.call('INCR', key)
    if n == 1 or n >= limit then redis.call('PEXPIRE', key, window) end
    if blocked then retry = math.max(retry, window) end
  elseif blocked then
    retry = math.max(retry, redis.call('PTTL', key))
  end
end
return retry
"""


@dataclass(frozen=True, slots=True)
class FailureCounter:
    """Failure counters of one kind of attempt: ``{subject: limit}`` per attempt, one window.

    A limit of 0 (or less) leaves its subject uncounted.
    """

    window_seconds: float

    def _args(self, subjects: dict[str, int], *, count: bool) -> list | None:
        counted = {s: n for s, n in subjects.items() if n > 0}
        if not counted:
            return None
        keys = [redis_key("authfail", s) for s in counted]
        window_ms = max(1, int(self.window_seconds * 1000))
        return [_FAILURES_LUA, len(keys), *keys, *counted.values(), window_ms, int(count)]

    @staticmethod
    def _seconds(raw) -> float:
        return max(0, int(raw)) / 1000

    async def aretry_after(self, subjects: dict[str, int], *, count: bool) -> float:
        """Seconds until the attempt's subjects are unblocked (0: not blocked); with ``count``,
        the attempt is counted as a failure too. One round trip; 0 when Redis cannot answer."""
        args = self._args(subjects, count=count)
        if args is None:
            return 0.0
        try:
            return self._seconds(await async_redis().eval(*args))
        except Exception as exc:
            logger.warning("cannot count failed authentication in Redis (%s)", exc)
            return 0.0

    def retry_after(self, subjects: dict[str, int], *, count: bool) -> float:
        args = self._args(subjects, count=count)
        if args is None:
            return 0.0
        try:
            return self._seconds(sync_redis().eval(*args))
        except Exception as exc:
            logger.warning("cannot count failed authentication in Redis (%s)", exc)
            return 0.0


class ApiAuthThrottle:
    """The API's rules on failed key authentication (see the module docstring)."""

    def _counter(self) -> FailureCounter:
        return FailureCounter(float(getattr(settings, "AUTH_FAILURE_WINDOW_SECONDS", 60)))

    @staticmethod
    def _address_subject(address: str | None) -> dict[str, int]:
        if not address:
            return {}
        return {f"addr:{address}": int(getattr(settings, "AUTH_FAILURES_PER_ADDRESS", 20))}

    async def blocked_for(self, address: str | None) -> float:
        """Seconds ``address`` stays blocked (0: not blocked); asked before a key lookup that
        would reach the database."""
        return await self._counter().aretry_after(self._address_subject(address), count=False)

    async def failed(self, address: str | None, prefix: str | None) -> float:
        """Count a failed attempt: seconds to answer 429 for instead of 401 (0: answer 401)."""
        subjects = self._address_subject(address)
        if prefix:
            limit = int(getattr(settings, "AUTH_FAILURES_PER_KEY_PREFIX", 10))
            subjects[f"prefix:{prefix}"] = limit
        return await self._counter().aretry_after(subjects, count=True)


api_auth_throttle = ApiAuthThrottle()
