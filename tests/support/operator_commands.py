"""What an operator types against a running platform: ``manage.py`` commands, a new API key,
one try at the admin's sign-in form."""

from __future__ import annotations

import re

import httpx

from tests.support.manage_server import run_manage


def manage(env: dict[str, str], *args: str) -> str:
    """``manage.py ARGS`` in a subprocess with the platform's environment: its stdout."""
    return run_manage(env, *args, timeout=120).stdout


def create_key(env: dict[str, str], *scopes: str, tenant: str = "acme") -> str:
    """A new key of ``tenant`` (the secret is the last line create_api_key prints)."""
    flags = [arg for scope in scopes for arg in ("--scope", scope)]
    out = manage(env, "create_api_key", "--tenant", tenant, "--name", "fault-test", *flags)
    return out.strip().splitlines()[-1]


def admin_sign_in(
    base_url: str, username: str, password: str, *, address: str = "127.0.0.1"
) -> httpx.Response:
    """One try at the admin's login form from ``address``: a 302 with the session cookie when
    it signed in, else the form again with its error."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(base_url=base_url, transport=transport, timeout=30) as client:
        page = client.get("/admin/login/").text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        return client.post(
            "/admin/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": token},
            headers={"Referer": f"{base_url}/admin/login/"},
        )
