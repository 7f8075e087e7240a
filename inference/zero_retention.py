"""What a tenant with zero data retention (Tenant.zero_data_retention) is refused: every API
that exists to keep what clients send (conversations, files and batches). What it kept
before the setting was turned on can still be read and deleted."""

from __future__ import annotations

from controlplane.access.principals import Principal
from controlplane.common.api_error import ApiError


def refuse_keeping(principal: Principal, what: str) -> None:
    """A 403 naming ``what`` would be kept, for such a tenant; nothing for any other."""
    if principal.zero_data_retention:
        raise ApiError(
            f"This tenant keeps no data on the server (zero data retention): {what}.",
            status=403,
            code="zero_data_retention",
        )
