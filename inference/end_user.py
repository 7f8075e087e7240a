"""Which end user a request names: usage per end user, their controls and budget."""

from __future__ import annotations

from typing import Any


def end_user_of(body: dict[str, Any]) -> str:
    """OpenAI's ``safety_identifier`` (the successor to ``user``) when set, else ``user``;
    "" when the request names none. Anthropic's ``metadata.user_id`` arrives as ``user``."""
    return body.get("safety_identifier") or body.get("user") or ""


def end_user_param(body: dict[str, Any]) -> str:
    """The field that named the end user, for a refusal's ``param``."""
    return "safety_identifier" if body.get("safety_identifier") else "user"
