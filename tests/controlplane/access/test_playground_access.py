"""A staff session gets a playground tenant only with the playground permission, and limits
unless it is a superuser's."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Permission

from controlplane.access.principals import staff_principal
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import tenant_update

pytestmark = pytest.mark.django_db(transaction=True)

DEFAULTS = {
    "requests_per_minute": 60,
    "tokens_per_minute": 100_000,
    "max_concurrent_requests": 4,
    "monthly_token_budget": None,
}


@pytest.fixture
def make_user(django_user_model, redis_client):
    def make(name, *, playground=False, **flags):
        user = django_user_model.objects.create_user(name, password="pw-123456", **flags)
        if playground:
            user.user_permissions.add(Permission.objects.get(codename="use_playground"))
        return user

    return sync_to_async(make)


def _limits(principal) -> dict:
    return {name: getattr(principal.limits, name) for name in DEFAULTS}


async def test_staff_without_the_permission_gets_no_playground(make_user):
    assert await staff_principal(await make_user("ops", is_staff=True)) is None
    assert not await Tenant.objects.filter(playground_user__isnull=False).aexists()


async def test_permitted_staff_get_the_configured_limits(make_user, settings):
    settings.PLAYGROUND_LIMITS = DEFAULTS
    user = await make_user("ops", is_staff=True, playground=True)
    principal = await staff_principal(user)
    assert principal is not None and principal.key_id == 0
    assert _limits(principal) == DEFAULTS
    # The tenant's own limits, where an admin set them, come first.
    tenant = await Tenant.objects.aget(pk=principal.tenant_id, playground_user=user)
    await sync_to_async(tenant_update)(tenant=tenant, requests_per_minute=5)
    assert _limits(await staff_principal(user)) == {**DEFAULTS, "requests_per_minute": 5}


async def test_superusers_are_unlimited(make_user, django_user_model):
    root = await sync_to_async(django_user_model.objects.create_superuser)(
        "root", "root@example.com", "pw-123456"
    )
    assert (await staff_principal(root)).limits.unlimited


async def test_the_user_row_is_read_again_each_time(make_user, django_user_model):
    """A socket keeps its user object; a deactivation in the admin must still count."""
    user = await make_user("ops", is_staff=True, playground=True)
    assert await staff_principal(user) is not None
    await django_user_model.objects.filter(pk=user.pk).aupdate(is_active=False)
    assert await staff_principal(user) is None
