"""The dashboard shows every tenant's usage: staff need the permission to view usage."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_staff_without_the_usage_permission_read_nothing(client, django_user_model, redis_client):
    user = django_user_model.objects.create_user("ops", password="pw-123456", is_staff=True)
    client.force_login(user)
    assert client.get(reverse("dashboard:data")).status_code == 403
    assert client.get(reverse("dashboard:index")).status_code == 403

    user.user_permissions.add(Permission.objects.get(codename="view_dailyusage"))
    client.force_login(django_user_model.objects.get(pk=user.pk))  # permissions are cached
    assert client.get(reverse("dashboard:data")).status_code == 200
    assert client.get(reverse("dashboard:index")).status_code == 200
