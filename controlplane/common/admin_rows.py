"""What the admin does after a service created a row: make its own unsaved instance that row."""

from __future__ import annotations

from django.db import models


def adopt_created_row(target: models.Model, created: models.Model) -> None:
    """Copy ``created`` (saved by a service) into the admin's unsaved ``target``, so the admin's
    messages, log entry and redirect name the row that exists."""
    for field in created._meta.concrete_fields:
        setattr(target, field.attname, getattr(created, field.attname))
    target._state.adding = False
    target._state.db = created._state.db
