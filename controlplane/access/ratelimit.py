"""Per-tenant rate limits, atomic in Redis across every API process.

Requests per minute and tokens per minute are token buckets that refill continuously (capacity
= the per-minute limit, refill = limit / 60 per second), as OpenAI's limits behave. Concurrency
is a sorted set of in-flight tickets scored by a lease deadline, so a crashed API process's
tickets expire instead of leaking. The monthly token budget is a counter per calendar month.
Monthly spend budgets (tenant, key and end user) compare this month's spend, which the usage
flush mirrors into Redis (controlplane/billing/spend_counters.py), against the budget: a
request is refused once the spend has reached it. A request naming an end user the tenant
blocked, or one over their budget, is refused the same way: their controls are a Redis hash
per tenant (controlplane/end_users/controls.py).

Admission checks every limit and takes from every bucket in one Lua script, so no interleaving
of processes can admit more than the limits allow (DRF's cache throttle is documented as
racy). Tokens are reserved as prompt + max_tokens and corrected at release with the real count.
Redis' own clock (TIME) is used, so API hosts' clocks need not agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from controlplane.billing.money import amount_to_units
from controlplane.billing.spend_counters import (
    end_user_spend_key,
    key_spend_key,
    tenant_spend_key,
)
from controlplane.common.redis_clients import redis_key
from controlplane.end_users.controls import controls_key

_COMMON_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function level(key, limit)
  local v = redis.call('HMGET', key, 'v', 't')
  local lv, lt = tonumber(v[1]), tonumber(v[2])
  if not lv then return limit end
  return math.min(limit, lv + math.max(0, now - lt) * limit / 60.0)
end
local function put(key, lv)
  redis.call('HSET', key, 'v', lv, 't', now)
  -- an idle bucket is full again after 60 s; let Redis forget it a little later
  redis.call('EXPIRE', key, 120)
end
-- {admitted, reason, retry_ms, req_remaining, req_reset_ms, tok_remaining, tok_reset_ms}
local function decision(reason, retry, rpm, rl, tpm, tl)
  local rr, rres, tr, tres = -1, -1, -1, -1
  if rpm > 0 then rr = math.max(0, math.floor(rl)); rres = math.ceil((rpm - rl) * 60000 / rpm) end
  if tpm > 0 then tr = math.max(0, math.floor(tl)); tres = math.ceil((tpm - tl) * 60000 / tpm) end
  local admitted = 0
  if reason == '' then admitted = 1 end
  return {admitted, reason, retry, rr, rres, tr, tres}
end
-- KEYS[5], KEYS[6]: this month's spend of the tenant and of the key; ARGV[5], ARGV[6]: their
-- budgets in the same units (-1: none). KEYS[7]: the end user's spend this month, KEYS[8]: the
-- tenant's end-user controls (name -> "budget blocked"); ARGV[7]: the end user ('': none),
-- ARGV[8]: the tenant's budget per end user (-1: none).
local function end_user_reason()
  if ARGV[7] == '' then return '' end
  local ub = tonumber(ARGV[8])
  local own = redis.call('HGET', KEYS[8], ARGV[7])
  if own then
    local b, blocked = string.match(own, '^(%-?%d+) ([01])$')
    if blocked == '1' then return 'user_blocked' end
    if b and tonumber(b) >= 0 then ub = tonumber(b) end
  end
  if ub >= 0 and tonumber(redis.call('GET', KEYS[7]) or '0') >= ub then return 'user_spend' end
  return ''
end
local function spend_reason()
  local tb, kb = tonumber(ARGV[5]), tonumber(ARGV[6])
  if tb >= 0 and tonumber(redis.call('GET', KEYS[5]) or '0') >= tb then return 'spend' end
  if kb >= 0 and tonumber(redis.call('GET', KEYS[6]) or '0') >= kb then return 'key_spend' end
  return end_user_reason()
end
"""

# KEYS: requests bucket, tokens bucket, in-flight set, month budget counter, tenant spend,
#       key spend, end user spend, end-user controls
# ARGV: rpm, tpm, max_concurrent, budget (-1: unlimited), tenant spend budget, key spend
#       budget, end user, budget per end user, cost, ticket, lease_s, budget_ttl_s
# Returns {admitted, reason, retry_ms, req_remaining, req_reset_ms, tok_remaining, tok_reset_ms}
_ACQUIRE_LUA = (
    _COMMON_LUA
    + """
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local conc, budget = tonumber(ARGV[3]), tonumber(ARGV[4])
local cost, lease = tonumber(ARGV[9]), tonumber(ARGV[11])
local rl, tl = -1, -1
if rpm >= 0 then rl = level(KEYS[1], rpm) end
if tpm >= 0 then tl = level(KEYS[2], tpm) end
local reason, retry = spend_reason(), 0
if reason ~= '' then
  -- over a spend budget: nothing else matters
elseif tpm >= 0 and cost > tpm then
  reason = 'too_large'
elseif rpm >= 0 and rl < 1 then
  reason = 'requests'; retry = math.ceil((1 - rl) * 60000 / rpm)
elseif tpm >= 0 and tl < cost then
  reason = 'tokens'; retry = math.ceil((cost - tl) * 60000 / tpm)
end
if reason == '' and conc >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= conc then reason = 'concurrency'; retry = 1000 end
end
if reason == '' and budget >= 0 then
  local used = tonumber(redis.call('GET', KEYS[4]) or '0')
  if used + cost > budget then reason = 'budget' end
end
if reason == '' then
  if rpm >= 0 then rl = rl - 1; put(KEYS[1], rl) end
  if tpm >= 0 then tl = tl - cost; put(KEYS[2], tl) end
  if conc >= 0 then
    redis.call('ZADD', KEYS[3], now + lease, ARGV[10])
    redis.call('EXPIRE', KEYS[3], lease)
  end
  if budget >= 0 then
    redis.call('INCRBY', KEYS[4], cost)
    redis.call('EXPIRE', KEYS[4], tonumber(ARGV[12]))
  end
end
return decision(reason, retry, rpm, rl, tpm, tl)
"""
)

# Read-only: would a request costing at least one token be refused right now? Out of
# requests, out of tokens, at the concurrency limit or over budget, whatever its size.
# KEYS and ARGV as the acquire script's, without cost, ticket and TTLs.
_PEEK_LUA = (
    _COMMON_LUA
    + """
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local conc, budget = tonumber(ARGV[3]), tonumber(ARGV[4])
local rl, tl = -1, -1
if rpm >= 0 then rl = level(KEYS[1], rpm) end
if tpm >= 0 then tl = level(KEYS[2], tpm) end
local reason, retry = spend_reason(), 0
if reason ~= '' then
  -- over a spend budget
elseif rpm == 0 then
  reason = 'requests'; retry = 60000
elseif tpm == 0 then
  reason = 'too_large'
elseif rpm > 0 and rl < 1 then
  reason = 'requests'; retry = math.ceil((1 - rl) * 60000 / rpm)
elseif tpm > 0 and tl < 1 then
  reason = 'tokens'; retry = math.ceil((1 - tl) * 60000 / tpm)
elseif conc >= 0 and redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') >= conc then
  reason = 'concurrency'; retry = 1000
elseif budget >= 0 and tonumber(redis.call('GET', KEYS[4]) or '0') >= budget then
  reason = 'budget'
end
return decision(reason, retry, rpm, rl, tpm, tl)
"""
)

# KEYS: tokens bucket, in-flight set, month budget counter
# ARGV: tpm (-1: unlimited), unused tokens (reserved - used; negative when it used more),
#       ticket, budget limited (1/0)
_RELEASE_LUA = (
    _COMMON_LUA
    + """
local tpm, unused = tonumber(ARGV[1]), tonumber(ARGV[2])
if tpm >= 0 and unused ~= 0 then put(KEYS[1], math.min(tpm, level(KEYS[1], tpm) + unused)) end
redis.call('ZREM', KEYS[2], ARGV[3])
if ARGV[4] == '1' and unused ~= 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('DECRBY', KEYS[3], unused)
end
return 1
"""
)

REASONS = (
    "requests",
    "tokens",
    "too_large",
    "concurrency",
    "budget",
    "spend",
    "key_spend",
    "user_spend",
    "user_blocked",
)


@dataclass(frozen=True, slots=True)
class Limits:
    """A tenant's limits; None means unlimited."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent_requests: int | None = None
    monthly_token_budget: int | None = None
    monthly_spend_budget: Decimal | None = None  # the tenant's, in BILLING_CURRENCY
    key_monthly_spend_budget: Decimal | None = None  # the key's own
    end_user_spend_budget: Decimal | None = None  # each end user's, unless they have their own
    end_user_controls: bool = False  # some end users have controls (a budget, a block)

    @property
    def unlimited(self) -> bool:
        return (
            self.requests_per_minute is None
            and self.tokens_per_minute is None
            and self.max_concurrent_requests is None
            and self.monthly_token_budget is None
            and self.monthly_spend_budget is None
            and self.key_monthly_spend_budget is None
            and self.end_user_spend_budget is None
            and not self.end_user_controls
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """What admission decided, with the numbers behind OpenAI's ``x-ratelimit-*`` headers."""

    admitted: bool
    reason: str  # "" when admitted, else one of REASONS
    retry_after_s: float
    remaining_requests: int | None
    reset_requests_s: float | None
    remaining_tokens: int | None
    reset_tokens_s: float | None


def _arg(value: int | None) -> int:
    return -1 if value is None else int(value)


def _amount_arg(amount: Decimal | None) -> int:
    return -1 if amount is None else amount_to_units(amount)


def _opt(raw: int, scale: float = 1.0) -> float | None:
    raw = int(raw)
    return None if raw < 0 else raw / scale


def _month_key(tenant_id: int) -> str:
    return redis_key("rl", tenant_id, "budget", datetime.now(UTC).strftime("%Y%m"))


def _keys(tenant_id: int) -> tuple[str, str, str]:
    return (
        redis_key("rl", tenant_id, "req"),
        redis_key("rl", tenant_id, "tok"),
        redis_key("rl", tenant_id, "inflight"),
    )


class RateLimiter:
    """Acquire before a request runs, release after it ends; both are one Redis round trip.

    ``lease_seconds`` bounds how long a concurrency slot outlives an API process that died
    without releasing it.
    """

    def __init__(self, *, lease_seconds: int = 900):
        self.lease_seconds = lease_seconds

    @staticmethod
    def _limit_args(
        script: str, tenant_id: int, key_prefix: str, limits: Limits, end_user: str
    ) -> list:
        """A script's keys and the limits, as the acquire and peek scripts read them."""
        return [
            script,
            8,
            *_keys(tenant_id),
            _month_key(tenant_id),
            tenant_spend_key(tenant_id),
            key_spend_key(tenant_id, key_prefix),
            end_user_spend_key(tenant_id, end_user),
            controls_key(tenant_id),
            _arg(limits.requests_per_minute),
            _arg(limits.tokens_per_minute),
            _arg(limits.max_concurrent_requests),
            _arg(limits.monthly_token_budget),
            _amount_arg(limits.monthly_spend_budget),
            _amount_arg(limits.key_monthly_spend_budget),
            end_user,
            _amount_arg(limits.end_user_spend_budget),
        ]

    def _acquire_args(
        self,
        tenant_id: int,
        key_prefix: str,
        limits: Limits,
        cost: int,
        ticket: str,
        end_user: str,
    ) -> list:
        args = self._limit_args(_ACQUIRE_LUA, tenant_id, key_prefix, limits, end_user)
        return [*args, int(cost), ticket, self.lease_seconds, 40 * 86400]

    @staticmethod
    def _decision(raw: list) -> Decision:
        admitted, reason, retry, rr, rres, tr, tres = raw
        return Decision(
            admitted=bool(int(admitted)),
            reason=reason.decode() if isinstance(reason, bytes) else reason,
            retry_after_s=int(retry) / 1000,
            remaining_requests=None if int(rr) < 0 else int(rr),
            reset_requests_s=_opt(rres, 1000),
            remaining_tokens=None if int(tr) < 0 else int(tr),
            reset_tokens_s=_opt(tres, 1000),
        )

    async def acquire(
        self,
        redis,
        *,
        tenant_id: int,
        limits: Limits,
        cost: int,
        ticket: str,
        key_prefix: str = "",
        end_user: str = "",
    ) -> Decision:
        """Admit (and reserve ``cost`` tokens) or refuse, atomically. ``redis``: async client;
        ``key_prefix``: the calling key, whose own spend budget is in ``limits``;
        ``end_user``: the end user the request names ("": none)."""
        args = self._acquire_args(tenant_id, key_prefix, limits, cost, ticket, end_user)
        return self._decision(await redis.eval(*args))

    def acquire_sync(
        self,
        redis,
        *,
        tenant_id: int,
        limits: Limits,
        cost: int,
        ticket: str,
        key_prefix: str = "",
        end_user: str = "",
    ) -> Decision:
        args = self._acquire_args(tenant_id, key_prefix, limits, cost, ticket, end_user)
        return self._decision(redis.eval(*args))

    async def peek(
        self,
        redis,
        *,
        tenant_id: int,
        limits: Limits,
        key_prefix: str = "",
        end_user: str = "",
    ) -> Decision:
        """Whether any request would be refused now (out of requests, out of tokens, at the
        concurrency limit, over a budget), reserving nothing: a cheap check before planning."""
        args = self._limit_args(_PEEK_LUA, tenant_id, key_prefix, limits, end_user)
        return self._decision(await redis.eval(*args))

    def release_into(
        self, pipe, *, tenant_id: int, limits: Limits, reserved: int, used: int, ticket: str
    ) -> None:
        """Queue the release on a pipeline (so it shares a round trip with usage recording)."""
        _, tok, inflight = _keys(tenant_id)
        pipe.eval(
            _RELEASE_LUA,
            3,
            tok,
            inflight,
            _month_key(tenant_id),
            _arg(limits.tokens_per_minute),
            int(reserved) - int(used),
            ticket,
            0 if limits.monthly_token_budget is None else 1,
        )


def format_reset(seconds: float) -> str:
    """OpenAI's reset format: "20ms", "1.5s", "6m0s"."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s"


def ratelimit_headers(limits: Limits, decision: Decision) -> dict[str, str]:
    """OpenAI's x-ratelimit-* headers for each limited dimension (none for unlimited ones)."""
    headers: dict[str, str] = {}
    if limits.requests_per_minute is not None and decision.remaining_requests is not None:
        headers["x-ratelimit-limit-requests"] = str(limits.requests_per_minute)
        headers["x-ratelimit-remaining-requests"] = str(decision.remaining_requests)
        headers["x-ratelimit-reset-requests"] = format_reset(decision.reset_requests_s or 0.0)
    if limits.tokens_per_minute is not None and decision.remaining_tokens is not None:
        headers["x-ratelimit-limit-tokens"] = str(limits.tokens_per_minute)
        headers["x-ratelimit-remaining-tokens"] = str(decision.remaining_tokens)
        headers["x-ratelimit-reset-tokens"] = format_reset(decision.reset_tokens_s or 0.0)
    return headers
