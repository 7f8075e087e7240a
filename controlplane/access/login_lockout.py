"""Admin sign-in lockout on django-axes: after repeated wrong passwords for one username, or
from one address, sign-in is refused for a while, with a page that says so.

Axes does the work (its authentication backend refuses a locked-out client before any
password is checked, its middleware answers with ``admin_lockout_page``); the counters live in
the Redis cache, so every API process sees the same ones and they expire by themselves after
the cool-off. What axes lacks is a limit per lockout parameter: it compares the highest count
with one limit. ``PerParameterLimitCacheHandler`` gives the username and the address limits of
their own (``ADMIN_LOGIN_FAILURES_PER_USERNAME``, ``ADMIN_LOGIN_FAILURES_PER_ADDRESS``), because
an address may be an office of admins behind one NAT while a username is one account.
"""

from __future__ import annotations

import logging
import math

from axes.handlers.cache import AxesCacheHandler
from axes.helpers import (
    get_client_cache_keys,
    get_client_username,
    get_cool_off,
    get_failure_limit,
    get_lockout_parameters,
)
from axes.signals import user_locked_out
from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import render
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

__all__ = ["PerParameterLimitCacheHandler", "admin_lockout_page", "highest_failure_limit"]


def _parameter_limits() -> dict[str, int]:
    return {
        "username": settings.ADMIN_LOGIN_FAILURES_PER_USERNAME,
        "ip_address": settings.ADMIN_LOGIN_FAILURES_PER_ADDRESS,
    }


def highest_failure_limit(request, credentials) -> int:
    """AXES_FAILURE_LIMIT: axes' one limit is the highest of ours, so that its own check on a
    raw count (in AxesCacheHandler.user_login_failed) can only be late, never early."""
    return max(_parameter_limits().values())


class PerParameterLimitCacheHandler(AxesCacheHandler):
    """Axes' cache handler with a limit for each lockout parameter.

    Each parameter's count is scaled to AXES_FAILURE_LIMIT before axes compares it with that
    limit: ``count * highest // own_limit >= highest`` exactly when ``count >= own_limit``.
    Redis errors let the attempt through, as the API's failed-key throttle does: admins can
    still sign in (sessions live in the database) while Redis is away.
    """

    def get_failures(self, request, credentials=None) -> int:
        keys = get_client_cache_keys(request, credentials)  # one per lockout parameter, in order
        try:
            counts = self.cache.get_many(keys)
        except RedisError as exc:
            logger.warning("cannot read admin sign-in failures in Redis (%s)", exc)
            return 0
        highest = get_failure_limit(request, credentials)
        limits = _parameter_limits()
        parameters = get_lockout_parameters(request, credentials)
        return max(
            (
                counts.get(key, 0) * highest // limits[parameter]
                for key, parameter in zip(keys, parameters, strict=True)
            ),
            default=0,
        )

    def user_login_failed(self, sender, credentials: dict, request=None, **kwargs):
        try:
            super().user_login_failed(sender, credentials, request, **kwargs)
        except RedisError as exc:
            logger.warning("cannot count a failed admin sign-in in Redis (%s)", exc)
            return
        # A parameter under the highest limit reached its own one: lock out now (axes only
        # compared the raw count with the highest limit).
        if request is None or request.axes_locked_out or not self.is_locked(request, credentials):
            return
        username = get_client_username(request, credentials)
        logger.warning("Admin sign-in locked out for %r from %s", username, request.axes_ip_address)
        request.axes_locked_out = True
        request.axes_credentials = credentials
        user_locked_out.send(
            "axes", request=request, username=username, ip_address=request.axes_ip_address
        )


def admin_lockout_page(request, original_response=None, credentials=None) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the admin's sign-in page, saying why and for how long.

    Every refused attempt starts the cool-off again (AXES_RESET_COOL_OFF_ON_FAILURE_DURING_
    LOCKOUT), so the whole cool-off is the time left.
    """
    minutes = max(1, math.ceil(get_cool_off(request).total_seconds() / 60))
    return render(
        request,
        "admin/login_locked_out.html",
        {"minutes": minutes, "title": "Sign-in locked"},
        status=settings.AXES_HTTP_RESPONSE_CODE,
    )
