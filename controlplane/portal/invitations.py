"""Invitation links: where a new tenant user sets their password (Django's password-reset
token, so one use, and void after PASSWORD_RESET_TIMEOUT or once the password changes)."""

from __future__ import annotations

from django.contrib.auth.tokens import default_token_generator
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode


def invitation_path(user) -> str:
    return reverse(
        "portal:invitation",
        kwargs={
            "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
            "token": default_token_generator.make_token(user),
        },
    )
