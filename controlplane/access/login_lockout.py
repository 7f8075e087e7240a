"""Admin sign-in lockout: after repeated wrong passwords for one username, or from one address,
sign-in is refused for a while, with a message that says so.

``LockoutModelBackend`` is Django's ModelBackend counting failures in Redis (auth_throttle.py's
counters, one round trip per attempt): every ``authenticate()`` call goes through it, the
admin's login form included. ``LockoutAdminAuthenticationForm`` turns a refusal during a
lockout into its own message instead of "wrong username or password". Limits:
``ADMIN_LOGIN_FAILURES_PER_USERNAME`` (default 5), ``ADMIN_LOGIN_FAILURES_PER_ADDRESS`` (20),
``ADMIN_LOGIN_LOCKOUT_SECONDS`` (900): that many failures within that time lock sign-in out
for that time; attempts during a lockout are refused without checking the password.
"""

from __future__ import annotations

import math

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import PermissionDenied

from controlplane.access.auth_throttle import FailureCounter

__all__ = ["LockoutAdminAuthenticationForm", "LockoutModelBackend", "login_locked_for"]


def _counter() -> FailureCounter:
    return FailureCounter(float(getattr(settings, "ADMIN_LOGIN_LOCKOUT_SECONDS", 900)))


def _subjects(username: str | None, address: str | None) -> dict[str, int]:
    subjects = {}
    if username:
        limit = int(getattr(settings, "ADMIN_LOGIN_FAILURES_PER_USERNAME", 5))
        subjects[f"login:user:{username.strip().lower()}"] = limit
    if address:
        subjects[f"login:addr:{address}"] = int(
            getattr(settings, "ADMIN_LOGIN_FAILURES_PER_ADDRESS", 20)
        )
    return subjects


def _address(request) -> str | None:
    return request.META.get("REMOTE_ADDR") if request is not None else None


def login_locked_for(username: str | None, request) -> float:
    """Seconds until ``username`` may sign in from ``request``'s address again (0: now)."""
    return _counter().retry_after(_subjects(username, _address(request)), count=False)


class LockoutModelBackend(ModelBackend):
    """ModelBackend that refuses a locked-out username or address and counts wrong passwords.

    Raising PermissionDenied stops ``authenticate()`` at this backend: a lockout cannot be
    walked around through another one.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        if username is None or password is None:
            return None
        if login_locked_for(username, request) > 0:
            raise PermissionDenied("locked out")
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            _counter().retry_after(_subjects(username, _address(request)), count=True)
        return user


class LockoutAdminAuthenticationForm(AdminAuthenticationForm):
    """The admin's login form, saying so when sign-in is locked out."""

    def clean(self):
        try:
            return super().clean()
        except forms.ValidationError:
            retry = login_locked_for(self.cleaned_data.get("username"), self.request)
            if retry <= 0:
                raise
            minutes = max(1, math.ceil(retry / 60))
            raise forms.ValidationError(
                "Too many failed sign-in attempts for this account or from this address. "
                f"Try again in {minutes} minute{'s' if minutes != 1 else ''}.",
                code="locked_out",
            ) from None
