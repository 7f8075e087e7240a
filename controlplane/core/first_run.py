"""What the serve command sets up on a fresh install: an admin user and a demo tenant with a key.

The generated admin password and demo API key are kept in var/credentials.json (mode 0600) so
that later runs can print them again; the database itself stores only hashes.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction

from controlplane.tenants.models import Tenant
from controlplane.tenants.services import api_key_create, tenant_create

DEMO_TENANT = "demo"
ADMIN_USERNAME = "admin"


@dataclass
class Credentials:
    admin_username: str | None = None
    admin_password: str | None = None
    demo_api_key: str | None = None


def _load(path: Path) -> Credentials:
    try:
        return Credentials(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return Credentials()


def _save(path: Path, creds: Credentials) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(creds.__dict__, fh, indent=2)


@transaction.atomic
def ensure_first_run_setup(*, credentials_path: Path, served_model_names: list[str]) -> Credentials:
    """Create the admin user and the demo tenant if missing; return what can be shown."""
    creds = _load(credentials_path)
    User = get_user_model()
    if not User.objects.filter(is_superuser=True).exists():
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(ADMIN_USERNAME, email="", password=password)
        creds.admin_username, creds.admin_password = ADMIN_USERNAME, password
    if not Tenant.objects.filter(name=DEMO_TENANT).exists():
        tenant = tenant_create(name=DEMO_TENANT)
        creds.demo_api_key = api_key_create(tenant=tenant, name="demo key").secret
    _save(credentials_path, creds)
    return creds
