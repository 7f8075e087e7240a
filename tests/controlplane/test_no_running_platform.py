"""A command that needs the running platform and finds none says so on stderr, and what that
means, instead of quietly talking to whatever Redis listens on the default port."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from controlplane.tenants.models import ApiKey

pytestmark = pytest.mark.django_db

NOBODY = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@pytest.fixture
def no_platform(settings):
    """REDIS_URL unset and no live serve recorded: settings fell back to the default URL."""
    settings.REDIS_URL_SOURCE = "default"
    settings.DEFAULT_REDIS_URL = settings.REDIS_URL


def _run(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_revocation_without_a_platform_is_stored_and_says_what_that_means(
    no_platform, make_tenant, make_key
):
    key, _ = make_key(make_tenant("Lonely"))
    out, err = _run("revoke_api_key", key.prefix)
    assert f"revoked key {key.prefix}" in out
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    [warning] = err.splitlines()
    assert warning.startswith("warning: no running platform found")
    assert "run/redis.json" in warning
    assert "The revocation is stored in the database" in warning
    assert "within a minute" in warning


@pytest.mark.parametrize(
    "args, change",
    [
        (("create_tenant", "Solo"), "The tenant is stored"),
        (("create_api_key", "--tenant", "Quiet"), "The new key is stored"),
    ],
)
def test_other_changes_without_a_platform_warn_too(no_platform, make_tenant, args, change):
    make_tenant("Quiet")
    _, err = _run(*args)
    assert "no running platform found" in err and change in err


def test_commands_say_nothing_when_the_platform_is_found(make_tenant, make_key):
    # The session's Redis is what settings point at, as with REDIS_URL or a live serve.
    key, _ = make_key(make_tenant("Found"))
    _, err = _run("revoke_api_key", key.prefix)
    assert "no running platform" not in err


def test_flush_usage_without_a_reachable_redis_fails_with_a_clear_error(settings, no_platform):
    settings.REDIS_URL = settings.DEFAULT_REDIS_URL = NOBODY
    err = StringIO()
    with pytest.raises(CommandError, match=f"cannot reach Redis at {NOBODY}"):
        call_command("flush_usage", stdout=StringIO(), stderr=err)
    assert "usage events wait in the running platform's Redis" in err.getvalue()
