"""Load on demand, as one API process sees it.

A request for a model with no live engine asks the control plane to wake the model's
scale-to-zero deployment (``controlplane.fleet.demand.deployment_wake``: 0 replicas become 1)
and waits, polling the engines' status records, until an engine is live or
``FLEET_WAKE_TIMEOUT_S`` has passed. A model with no such deployment is refused at once, as
before. The wait is an ``asyncio.sleep`` loop on the request's own task: it never blocks the
event loop, and a client that disconnects cancels it (Django cancels the view's task), with
nothing yet sent to an engine. The request was admitted once, before the wait; it is
submitted once, after it, so nothing is reserved or billed twice.

Every request also touches its model's last-use key (at most once a second per model and
process): the idle clock the reconciler unloads scale-to-zero deployments by. Requests
waiting for a cold start keep touching it, so a model being waited for is never idle.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
from asgiref.sync import sync_to_async

from engine.redis_outage import warn_failure

if TYPE_CHECKING:
    from controlplane.fleet.demand import Wake

logger = logging.getLogger(__name__)

# How often a waiting request looks at the status records again.
POLL_S = 0.5
# Last-use writes per model and process: one a second is plenty for idle timeouts of minutes.
TOUCH_EVERY_S = 1.0
# How long one answer of ``deployment_wake`` is reused in this process. Asking again while
# waiting is harmless (the wake is idempotent) and heals a race with an idle unload that
# scaled the deployment back to 0 just as it was woken.
WAKE_EVERY_S = 5.0


class ColdStarts:
    """Wakes scale-to-zero deployments for one API process and records last use."""

    def __init__(self, redis: aioredis.Redis, *, timeout_s: float):
        self.redis = redis
        self.timeout_s = timeout_s
        self._touched: dict[str, float] = {}
        self._wakes: dict[str, tuple[float, Wake | None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def touch(self, model: str) -> None:
        """Record a use of ``model``, unless this process did within TOUCH_EVERY_S."""
        now = time.monotonic()
        if now - self._touched.get(model, -TOUCH_EVERY_S) < TOUCH_EVERY_S:
            return
        self._touched[model] = now
        from controlplane.fleet.demand import atouch_used  # lazily: see _wake

        try:
            await atouch_used(self.redis, model)
        except Exception as exc:  # the idle clock is not worth failing a request over
            warn_failure(logger, exc, "could not record the last use of %s", model)

    async def wait_for_engine(self, model: str, ready: Callable[[], Awaitable[bool]]) -> str:
        """Wake ``model``'s scale-to-zero deployment and wait until ``ready()``; "" once it
        is, else why the request is refused (no such deployment, failed, or too slow)."""
        wake = await self._wake(model)
        if wake is None:
            return f"no engine is serving model {model!r} right now"
        deadline = time.monotonic() + self.timeout_s
        while not await ready():
            if wake is None:  # the deployment was undeployed or stopped scaling to zero
                return f"no engine is serving model {model!r} right now"
            if wake.failed_reason:
                return f"model {model!r} could not be started: {wake.failed_reason}"
            if time.monotonic() >= deadline:
                return (
                    f"model {model!r} is starting (it was scaled to zero) and was not ready "
                    f"within {self.timeout_s:.0f} s; retry later"
                )
            await self.touch(model)
            await asyncio.sleep(POLL_S)
            wake = await self._wake(model)
        return ""

    async def _wake(self, model: str) -> Wake | None:
        """``deployment_wake``, asked at most every WAKE_EVERY_S per model by this process
        (a burst of requests makes one database write, not one each)."""
        # Imported here, not at the top: the fleet's models need Django's apps loaded, and
        # the transport is also used without Django (benches, engine tests).
        from controlplane.fleet.demand import deployment_wake

        lock = self._locks.setdefault(model, asyncio.Lock())
        async with lock:
            cached = self._wakes.get(model)
            if cached is not None and time.monotonic() - cached[0] < WAKE_EVERY_S:
                return cached[1]
            try:
                wake = await sync_to_async(deployment_wake)(model=model)
            except Exception:  # the database away: refuse as before rather than hang
                logger.warning("could not wake a deployment of %s", model, exc_info=True)
                wake = None
            if wake is not None and wake.woke:
                logger.info("woke %s for a request of model %s", wake.deployment, model)
            self._wakes[model] = (time.monotonic(), wake)
            return wake
