"""The test identity provider (tests/support/oidc_provider/) as a running process: its
issuer, the client the platform is registered as, and its people."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from controlplane.launcher.redis_server import free_port
from tests.support.processes import running


@dataclass(frozen=True)
class IdentityProviderProcess:
    issuer: str
    client_id: str
    client_secret: str


def _discovery_served(issuer: str) -> bool:
    try:
        url = f"{issuer}/.well-known/openid-configuration"
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def identity_provider(
    workdir: Path, *, redirect_uri: str, users: list[dict]
) -> Iterator[IdentityProviderProcess]:
    """The provider serving on a free port inside the block, the platform registered with
    ``redirect_uri``; ``users``: ``{"username", "email", "password", "verified"}``."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    issuer = f"http://127.0.0.1:{port}/o"
    provider = IdentityProviderProcess(
        issuer=issuer, client_id="llm-platform", client_secret="idp-client-secret"
    )
    config = {
        "client_id": provider.client_id,
        "client_secret": provider.client_secret,
        "redirect_uri": redirect_uri,
        "users": users,
    }
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")},
        "IDP_DATABASE": str(workdir / "idp.sqlite3"),
        "IDP_ISSUER": issuer,
    }
    args = [sys.executable, "-m", "tests.support.oidc_provider", str(port), json.dumps(config)]
    with running(
        args,
        env,
        workdir / "idp.log",
        ready=lambda: _discovery_served(issuer),
        what="identity provider",
        timeout=90,
    ):
        yield provider
