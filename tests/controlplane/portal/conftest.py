"""Two tenants, each with an owner and a key, for the portal's page and sign-in tests."""

from __future__ import annotations

import pytest

from tests.support.portal_people import PASSWORD, PortalTenant, portal_tenant


@pytest.fixture
def acme(db, make_tenant, make_key) -> PortalTenant:
    return portal_tenant(make_tenant, make_key, "Acme")


@pytest.fixture
def globex(db, make_tenant, make_key) -> PortalTenant:
    return portal_tenant(make_tenant, make_key, "Globex")


@pytest.fixture
def acme_client(client, acme):
    """A browser-less client signed in as Acme's owner through the portal's sign-in form."""
    response = client.post("/portal/login/", {"username": acme.owner_email, "password": PASSWORD})
    assert response.status_code == 302, response.content
    return client
