"""A flood of bad API keys, and of wrong admin passwords, against a real Daphne.

Before: 300 random keys in 5 s all got a plain 401 (each unknown prefix a database query), and
50 wrong admin passwords locked nothing. Now, from one address, failures past the limit get
OpenAI's 429 with Retry-After without the database (it is deleted mid-test to prove it), and
admin sign-in locks out with a message saying so.

Each test gets a Daphne with its own Redis prefix and database copy (see conftest), so its
lockouts of 127.0.0.1 reach no other test. Other loopback addresses (127.0.0.2, ...) stand
for other clients.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from pathlib import Path

import httpx
import pytest

from controlplane.tenants.key_secrets import prefix_of
from tests.support.fresh_daphne import fresh_daphne, isolated_env
from tests.support.operator_commands import admin_sign_in, manage

pytestmark = [pytest.mark.faults, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

PER_ADDRESS = 20  # the defaults: AUTH_FAILURES_PER_ADDRESS, AUTH_FAILURES_PER_KEY_PREFIX
PER_PREFIX = 10


def _client(base_url: str, address: str = "127.0.0.1") -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=base_url, transport=transport, timeout=30)


def _random_key() -> str:
    return "sk-" + secrets.token_hex(4) + secrets.token_urlsafe(32)


async def _models(client: httpx.AsyncClient, key: str) -> httpx.Response:
    return await client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})


async def _flood(client: httpx.AsyncClient, keys: list[str]) -> list[httpx.Response]:
    limit = asyncio.Semaphore(16)

    async def one(key):
        async with limit:
            return await _models(client, key)

    return await asyncio.gather(*(one(k) for k in keys))


def _assert_throttled(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert set(error) == {"message", "type", "param", "code"}
    assert 1 <= int(response.headers["retry-after"]) <= 60


async def _key_flood(base_url: str, api_key: str, database) -> None:
    async with _client(base_url) as attacker:
        assert (await _models(attacker, api_key)).status_code == 200  # now cached
        answers = await _flood(attacker, [_random_key() for _ in range(300)])
        assert [r.status_code for r in answers].count(401) == PER_ADDRESS
        for response in answers:
            if response.status_code != 401:
                _assert_throttled(response)

        database.unlink()  # from here on, any key lookup that reaches it fails with a 500
        async with _client(base_url, "127.0.0.2") as bystander:
            assert (await _models(bystander, _random_key())).status_code == 500
        _assert_throttled(await _models(attacker, _random_key()))  # refused before the lookup
        # A key the process holds was checked without the database: still served.
        assert (await _models(attacker, api_key)).status_code == 200


async def _prefix_guessing(base_url: str, api_key: str) -> None:
    prefix = prefix_of(api_key)
    statuses = []
    for i in range(PER_PREFIX + 3):  # each guess from another address
        async with _client(base_url, f"127.0.1.{i + 1}") as guesser:
            forged = prefix + secrets.token_urlsafe(32)
            statuses.append((await _models(guesser, forged)).status_code)
    assert statuses == [401] * PER_PREFIX + [429] * 3
    async with _client(base_url, "127.0.1.1") as owner:  # a prefix is public: no lockout
        assert (await _models(owner, api_key)).status_code == 200


def test_bad_keys_from_one_address_are_throttled_without_the_database(api_platform, tmp_path):
    env = isolated_env(api_platform, tmp_path)
    with fresh_daphne(env, tmp_path) as daphne:
        asyncio.run(_prefix_guessing(daphne.base_url, api_platform.api_key))
        database = tmp_path / "db.sqlite3"
        asyncio.run(_key_flood(daphne.base_url, api_platform.api_key, database))


_SUPERUSERS = """
from django.contrib.auth.models import User
for name in ("root", "ops"):
    User.objects.create_superuser(name, f"{name}@example.com", "right-pw-123")
"""
LOCKED = "Too many failed sign-in attempts"


def _sign_in(base_url: str, username: str, password: str, address="127.0.0.1") -> str:
    """One try at the admin's login form: "in", or the form's error message."""
    response = admin_sign_in(base_url, username, password, address=address)
    if response.status_code == 302:
        return "in"
    return re.search(r'class="errornote">\s*([^<]+?)\s*<', response.text).group(1)


def test_wrong_admin_passwords_lock_sign_in_out(api_platform, tmp_path):
    # About thirty passwords are checked: with Django's PBKDF2 they were most of this test's
    # minute on a slow CI machine.
    env = {
        **isolated_env(api_platform, tmp_path),
        "DJANGO_SETTINGS_MODULE": "tests.support.fast_password_settings",
        "PYTHONPATH": str(REPO),  # where manage.py's child finds the tests package
    }
    manage(env, "shell", "-c", _SUPERUSERS)
    with fresh_daphne(env, tmp_path) as daphne:
        base = daphne.base_url
        tries = [_sign_in(base, "root", f"guess-{i}") for i in range(50)]
        assert all(LOCKED not in t for t in tries[:4]), tries[:4]
        assert all(LOCKED in t for t in tries[5:]), tries[5:]  # the 5th failure locked it
        assert LOCKED in _sign_in(base, "root", "right-pw-123", "127.0.0.2")  # from anywhere
        assert _sign_in(base, "ops", "right-pw-123", "127.0.0.2") == "in"  # others are not
        # Twenty names guessed from one address lock that address, whatever the name.
        for i in range(20):
            _sign_in(base, f"nobody-{i}", "guess", "127.0.0.3")
        assert LOCKED in _sign_in(base, "ops", "right-pw-123", "127.0.0.3")
