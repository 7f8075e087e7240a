"""Admin sign-in locks out after repeated wrong passwords, per username and per address."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from axes.handlers.proxy import AxesProxyHandler
from django.contrib.auth import authenticate
from django.core.cache.backends.redis import RedisCache
from django.core.management import call_command
from django.test import RequestFactory
from django.urls import reverse

pytestmark = pytest.mark.django_db

LOCKED = "Too many failed sign-in attempts"


@pytest.fixture
def admins(django_user_model, redis_client):
    for name in ("root", "ops"):
        django_user_model.objects.create_superuser(name, f"{name}@example.com", "right-pw-123")


def _login(client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(
        reverse("admin:login"),
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR=address,
    )


def _signed_in(response) -> bool:
    return response.status_code == 302 and response["Location"] == "/admin/"


def test_wrong_passwords_lock_the_username_out_with_a_clear_message(client, admins, settings):
    settings.ADMIN_LOGIN_FAILURES_PER_USERNAME = 5
    for _ in range(4):
        response = _login(client, "root", "wrong")
        assert response.status_code == 200 and LOCKED not in response.content.decode()
    assert LOCKED in _login(client, "root", "wrong").content.decode()
    # Locked: the right password does not sign in either, from any address.
    locked = _login(client, "root", "right-pw-123", address="10.9.9.9")
    assert not _signed_in(locked) and LOCKED in locked.content.decode()
    assert _signed_in(_login(client, "ops", "right-pw-123"))  # other accounts are not locked


def test_wrong_passwords_from_one_address_lock_that_address_out(client, admins, settings):
    settings.ADMIN_LOGIN_FAILURES_PER_ADDRESS = 6
    for i in range(6):
        _login(client, f"guess-{i}", "wrong")
    assert LOCKED in _login(client, "ops", "right-pw-123").content.decode()
    assert _signed_in(_login(client, "ops", "right-pw-123", address="10.0.0.2"))


def test_the_lockout_ends_after_its_time(client, admins, settings):
    settings.ADMIN_LOGIN_FAILURES_PER_USERNAME = 2
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    _login(client, "root", "wrong")
    _login(client, "root", "wrong")
    assert not _signed_in(_login(client, "root", "right-pw-123"))
    time.sleep(1.1)
    assert _signed_in(_login(client, "root", "right-pw-123"))


def test_every_authenticate_call_goes_through_the_lockout(admins, settings):
    settings.ADMIN_LOGIN_FAILURES_PER_USERNAME = 3
    request = RequestFactory().post("/", REMOTE_ADDR="10.0.0.3")
    for _ in range(3):
        assert authenticate(request, username="root", password="wrong") is None
    assert authenticate(request, username="root", password="right-pw-123") is None
    assert authenticate(request, username="ops", password="right-pw-123") is not None


def test_an_operator_lifts_a_lockout_with_axes_reset_commands(client, admins, settings):
    settings.ADMIN_LOGIN_FAILURES_PER_USERNAME = 2
    settings.ADMIN_LOGIN_FAILURES_PER_ADDRESS = 3
    for _ in range(3):
        _login(client, "root", "wrong")
    assert LOCKED in _login(client, "ops", "right-pw-123").content.decode()  # the address
    call_command("axes_reset_ip", "10.0.0.1")
    assert _signed_in(_login(client, "ops", "right-pw-123"))
    assert LOCKED in _login(client, "root", "right-pw-123").content.decode()  # the username
    call_command("axes_reset_username", "root")
    assert _signed_in(_login(client, "root", "right-pw-123"))


def test_sign_in_works_without_redis_as_before(client, admins, monkeypatch):
    handler = AxesProxyHandler.get_implementation()
    monkeypatch.setattr(handler, "cache", RedisCache("redis://127.0.0.1:1/0", {}))
    response = _login(client, "root", "wrong")
    assert response.status_code == 200 and LOCKED not in response.content.decode()
    assert _signed_in(_login(client, "root", "right-pw-123"))
