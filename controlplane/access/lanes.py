"""Which lane of the API's door a request takes (controlplane/common/tenant_lanes.py): its
API key's tenant.

Read from the request's headers before anything authenticates it: the tenant when this process
has the key in its cache already (no database read, no epoch check: ``KeyCache.peek``), else
the key's prefix, else the client's address. A lane only orders requests, it lets nothing in:
a revoked or forged key lands in some lane and is refused by authentication, in the view, as
before.
"""

from __future__ import annotations

from collections.abc import Hashable

from controlplane.access.keycache import key_cache
from controlplane.common.tenant_lanes import lane_by_address
from controlplane.tenants.key_secrets import prefix_of


def lane_of(scope: dict) -> Hashable:
    """The lane of an HTTP request: its key's tenant if known here, else the key's prefix, else
    the client's address."""
    secret = None
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, secret = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() != "bearer":
                secret = None
            break
        if name == b"x-api-key":
            secret = value.decode("latin-1")
            break
    prefix = prefix_of(secret.strip()) if secret else None
    if prefix is not None:
        record = key_cache.peek(prefix)
        if record is not None:
            return ("tenant", record.tenant_id)
        return ("key", prefix)
    return lane_by_address(scope)
