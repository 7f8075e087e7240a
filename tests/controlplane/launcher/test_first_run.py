"""First-run setup: an admin and a demo tenant with a key that works, however often it runs."""

from __future__ import annotations

import pytest

from controlplane.access.keycache import key_cache
from controlplane.access.principals import check_key
from controlplane.launcher.first_run import ensure_first_run_setup
from controlplane.tenants.key_secrets import prefix_of
from controlplane.tenants.models import ApiKey
from controlplane.tenants.services import api_key_revoke

pytestmark = pytest.mark.django_db


def _works(secret: str) -> bool:
    key_cache.invalidate_local()
    try:
        check_key(key_cache.get(prefix_of(secret)), secret, endpoint="models")
    except Exception:
        return False
    return True


def test_the_printed_demo_key_works_and_is_kept(tmp_path):
    path = tmp_path / "credentials.json"
    first = ensure_first_run_setup(credentials_path=path, served_model_names=[])
    assert first.admin_password and _works(first.demo_api_key)
    again = ensure_first_run_setup(credentials_path=path, served_model_names=[])
    assert again.demo_api_key == first.demo_api_key


def test_a_demo_key_that_no_longer_works_is_replaced(tmp_path, settings):
    path = tmp_path / "credentials.json"
    first = ensure_first_run_setup(credentials_path=path, served_model_names=[])
    api_key_revoke(key=ApiKey.objects.get(prefix=prefix_of(first.demo_api_key)))
    assert not _works(first.demo_api_key)
    second = ensure_first_run_setup(credentials_path=path, served_model_names=[])
    assert second.demo_api_key != first.demo_api_key and _works(second.demo_api_key)

    # Keys are hashed with SECRET_KEY: under a new one, the stored key stops matching.
    settings.SECRET_KEY = "another-secret-key-than-before-" * 2
    assert not _works(second.demo_api_key)
    third = ensure_first_run_setup(credentials_path=path, served_model_names=[])
    assert _works(third.demo_api_key)
