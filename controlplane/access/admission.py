"""Limits and usage: let a request in under its tenant's limits, and account for it once done.

``check_request_limits`` refuses, before a request is planned (templated, tokenized), what
its tenant has no room for whatever its size; it reserves nothing. ``admit`` reserves
``prompt + max_tokens`` tokens (one Redis round trip, a Lua script in ratelimit.py; none when
the tenant is unlimited); ``finish`` releases the reservation, corrects it to the tokens
really used and queues the usage record for the batch writer (controlplane.usage), in one
background round trip, so no response waits on accounting.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from controlplane.access.principals import AccessError, Principal
from controlplane.access.ratelimit import RateLimiter, ratelimit_headers
from controlplane.billing.money import currency
from controlplane.common.redis_clients import async_redis, sync_redis
from controlplane.usage.events import UsageEvent, encode_event, new_event_id, usage_queue_key
from controlplane.usage.spool import spool
from engine.redis_outage import TRANSPORT_ERRORS, warn_failure

logger = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["Admission", "admit", "check_request_limits", "finish", "finish_pending"]


@dataclass
class Admission:
    """A request let in by the limits; ``headers`` go on the response (x-ratelimit-*)."""

    principal: Principal
    model: str
    reserved_tokens: int
    headers: dict[str, str] = field(default_factory=dict)
    request_id: str = ""
    started_at: float = 0.0  # time.monotonic() at admission
    limited: bool = False  # whether a reservation is held in Redis
    batch_id: str = ""  # set by the Batch API runner: the usage record names the batch


_limiter = RateLimiter()


def _rate_limited(
    principal: Principal, model: str, decision, headers: dict, end_user: str = ""
) -> AccessError:
    limits = principal.limits
    retry = max(1, math.ceil(decision.retry_after_s))
    headers = {**headers, "retry-after": str(retry)}
    if decision.reason in ("spend", "key_spend"):
        return _over_spend_budget(limits, decision.reason, headers)
    if decision.reason in ("user_spend", "user_blocked"):
        return _end_user_refused(decision.reason, end_user, headers)
    if decision.reason == "budget":
        return AccessError(
            "You exceeded your monthly token budget; contact your administrator.",
            status=429,
            type="insufficient_quota",
            code="insufficient_quota",
            headers={k: v for k, v in headers.items() if k != "retry-after"},
        )
    if decision.reason == "concurrency":
        message = (
            f"Too many concurrent requests for {model}: limit "
            f"{limits.max_concurrent_requests}. Retry when one finishes."
        )
        kind = "requests"
    elif decision.reason == "requests":
        message = (
            f"Rate limit reached for {model} on requests per min (RPM): Limit "
            f"{limits.requests_per_minute}. Please try again in {retry}s."
        )
        kind = "requests"
    elif decision.reason == "too_large":
        message = (
            f"Request too large for {model} on tokens per min (TPM): Limit "
            f"{limits.tokens_per_minute}. Lower the prompt or max_tokens."
        )
        kind = "tokens"
        headers.pop("retry-after")  # waiting would not help
    else:
        message = (
            f"Rate limit reached for {model} on tokens per min (TPM): Limit "
            f"{limits.tokens_per_minute}. Please try again in {retry}s."
        )
        kind = "tokens"
    return AccessError(message, status=429, type=kind, code="rate_limit_exceeded", headers=headers)


def _over_spend_budget(limits, reason: str, headers: dict) -> AccessError:
    if reason == "key_spend":
        whose, budget = "this API key", limits.key_monthly_spend_budget
    else:
        whose, budget = "your account", limits.monthly_spend_budget
    return AccessError(
        f"You have reached the monthly spend budget of {budget} {currency()} for {whose}; "
        "requests are refused until the next month begins (UTC) or your administrator "
        "raises the budget.",
        status=429,
        type="insufficient_quota",
        code="insufficient_quota",
        headers={k: v for k, v in headers.items() if k != "retry-after"},
    )


def _refused(principal: Principal, model: str, decision, headers: dict, end_user: str):
    """The refusal, with the limiter's reason on it (``limit_reason``) for the metrics."""
    error = _rate_limited(principal, model, decision, headers, end_user)
    error.limit_reason = decision.reason
    return error


def _end_user_refused(reason: str, end_user: str, headers: dict) -> AccessError:
    """The request's end user (its ``user`` or ``safety_identifier``) is blocked or over their
    monthly spend budget: the tenant's own controls, so the message names the end user."""
    headers = {k: v for k, v in headers.items() if k != "retry-after"}
    if reason == "user_blocked":
        return AccessError(
            f"The end user {end_user!r} is blocked on this account.",
            status=403,
            type="invalid_request_error",
            code="end_user_blocked",
            param="user",
            headers=headers,
        )
    return AccessError(
        f"The end user {end_user!r} has reached their monthly spend budget; their requests "
        "are refused until the next month begins (UTC) or the budget is raised.",
        status=429,
        type="insufficient_quota",
        code="insufficient_quota",
        param="user",
        headers=headers,
    )


async def _limiter_decision(call: Awaitable[T]) -> T:
    """The limiter's answer, or the 503 that says it cannot answer now."""
    try:
        return await call
    except TRANSPORT_ERRORS as exc:  # Redis away: a line per request, not a traceback each
        logger.warning("rate limiter unavailable: %s", exc)
        raise _limiter_unavailable() from exc
    except Exception as exc:
        logger.exception("rate limiter unavailable")
        raise _limiter_unavailable() from exc


def _limiter_unavailable() -> AccessError:
    return AccessError(
        "The rate limiter is unavailable; try again shortly.",
        status=503,
        type="server_error",
        code="service_unavailable",
        headers={"retry-after": "1"},
    )


async def check_request_limits(principal: Principal, *, model: str, end_user: str = "") -> None:
    """Raise the 429 ``admit`` would give any request of this tenant right now (no requests
    or tokens left this minute, concurrency or budget used up, the end user blocked or over
    budget), reserving nothing."""
    if principal.limits.unlimited:
        return
    decision = await _limiter_decision(
        _limiter.peek(
            async_redis(),
            tenant_id=principal.tenant_id,
            limits=principal.limits,
            key_prefix=principal.key_prefix,
            end_user=end_user,
        )
    )
    if not decision.admitted:
        headers = ratelimit_headers(principal.limits, decision)
        raise _refused(principal, model, decision, headers, end_user)


async def admit(
    principal: Principal,
    *,
    model: str,
    prompt_tokens: int,
    max_tokens: int,
    end_user: str = "",
) -> Admission:
    """Reserve capacity for a request under the tenant's limits (raises AccessError 429, or
    403 for a blocked end user).

    Tokens reserved: ``prompt_tokens + max_tokens``; ``finish`` corrects them to the real count.
    ``end_user``: the end user the request names, whose controls and budget apply too.
    """
    max_tokens = max_tokens or 0  # None: nothing reserved beyond the prompt; finish corrects
    if prompt_tokens < 0 or max_tokens < 0:
        raise AccessError(
            "prompt_tokens and max_tokens must not be negative",
            status=400,
            type="invalid_request_error",
        )
    reserved = int(prompt_tokens) + int(max_tokens)
    admission = Admission(
        principal=principal,
        model=model,
        reserved_tokens=reserved,
        request_id=os.urandom(12).hex(),
        started_at=time.monotonic(),
    )
    if principal.limits.unlimited:
        return admission
    decision = await _limiter_decision(
        _limiter.acquire(
            async_redis(),
            tenant_id=principal.tenant_id,
            limits=principal.limits,
            cost=reserved,
            ticket=admission.request_id,
            key_prefix=principal.key_prefix,
            end_user=end_user,
        )
    )
    headers = ratelimit_headers(principal.limits, decision)
    if not decision.admitted:
        raise _refused(principal, model, decision, headers, end_user)
    admission.headers = headers
    admission.limited = True
    return admission


async def finish(
    admission: Admission,
    *,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int,
    status: int,
    finish_reason: str | None,
    time_to_first_token: float | None,
    latency: float,
    adapter: str | None = None,
    object_id: str | None = None,
    end_user: str = "",
) -> None:
    """Release the reservation and queue the usage record, without making the caller wait.
    ``object_id``: the id the client got (``chatcmpl-...``, ``resp_...``), which the usage
    record then carries as its request id, so an answer can be found in the usage;
    ``end_user``: the request's ``user``, for usage per end user.

    Call it once per admission (the caller guards that: inference/use_cases). The Redis write
    (one round trip) runs as a background task; ``finish_pending`` waits for those still in
    flight. Never raises.
    """
    principal = admission.principal
    event = UsageEvent(
        finished_at=time.time(),
        request_id=object_id or admission.request_id,
        tenant_id=principal.tenant_id,
        key_id=principal.key_id,
        key_prefix=principal.key_prefix,
        model=admission.model,
        adapter=adapter or "",
        prompt_tokens=int(prompt_tokens),
        completion_tokens=int(completion_tokens),
        cached_tokens=int(cached_tokens),
        time_to_first_token=time_to_first_token,
        latency=float(latency),
        status=int(status),
        finish_reason=finish_reason or "",
        batch_id=admission.batch_id,
        end_user=end_user,
        event_id=new_event_id(),
    )
    used = int(prompt_tokens) + int(completion_tokens)
    task = asyncio.get_running_loop().create_task(_record(admission, event, used))
    _pending.add(task)  # a strong reference until done: the loop keeps only weak ones
    task.add_done_callback(_pending.discard)


_pending: set[asyncio.Task] = set()


async def _record(admission: Admission, event: UsageEvent, used: int) -> None:
    principal = admission.principal
    try:
        pipe = async_redis().pipeline(transaction=False)
        if admission.limited:
            _limiter.release_into(
                pipe,
                tenant_id=principal.tenant_id,
                limits=principal.limits,
                reserved=admission.reserved_tokens,
                used=used,
                ticket=admission.request_id,
            )
        pipe.rpush(usage_queue_key(), encode_event(event))
        await pipe.execute()
    except Exception as exc:
        # Redis away: the event waits in this process's spool file, never lost.
        logger.warning("usage of request %s spooled: %s", admission.request_id, exc)
        await asyncio.to_thread(spool.append, encode_event(event))
        return
    if spool.has_events():
        await asyncio.to_thread(_replay_spool)


def _replay_spool() -> None:
    try:
        spool.replay(lambda lines: sync_redis().rpush(usage_queue_key(), *lines))
    except Exception as exc:  # Redis gone again: the next request's finish retries
        warn_failure(logger, exc, "spooled usage events not replayed yet")


async def finish_pending() -> None:
    """Wait until every ``finish`` of this event loop has reached Redis (shutdown, tests)."""
    loop = asyncio.get_running_loop()
    mine = [t for t in _pending if t.get_loop() is loop]
    if mine:
        await asyncio.gather(*mine, return_exceptions=True)
