"""The checks on a tenant's limits, fair share and spend budget that every write passes
(admin, commands, portal): ValidationError with the reason."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError

from controlplane.tenants.models import MAX_SHARE_WEIGHT, SERVICE_CLASSES


def check_limits(limits: dict[str, int | None]) -> None:
    for name, value in limits.items():
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValidationError(f"{name} must be a positive integer or empty (unlimited)")


def check_share(changes: dict[str, Any]) -> None:
    """The fair-share fields (Tenant.share_weight, Tenant.service_class), when given."""
    weight = changes.get("share_weight", 1)
    if (
        isinstance(weight, bool)
        or not isinstance(weight, int)
        or not 1 <= weight <= MAX_SHARE_WEIGHT
    ):
        raise ValidationError(f"share_weight must be an integer from 1 to {MAX_SHARE_WEIGHT}")
    if changes.get("service_class", "interactive") not in SERVICE_CLASSES:
        raise ValidationError(f"service_class must be one of {', '.join(SERVICE_CLASSES)}")


def check_spend_budget(value: Decimal | None) -> Decimal | None:
    if value is None:
        return None
    value = Decimal(value)
    if value <= 0 or value != value.quantize(Decimal("0.01")):
        raise ValidationError(
            "a monthly spend budget is a positive amount with at most 2 decimal places, "
            "or empty (none)"
        )
    return value
