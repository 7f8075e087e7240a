"""/v1/end_users: the body that sets an end user's controls."""

from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from inference.schemas.fields import StrictBooleanField


class EndUserControlsSerializer(serializers.Serializer):
    """Fields left out keep their value (a new end user: no budget of their own, not blocked)."""

    monthly_spend_budget = serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        min_value=Decimal("0.01"),
        required=False,
        allow_null=True,
        help_text="Their own spend per calendar month (UTC), a number or a decimal string; "
        "null: the tenant's budget per end user applies.",
    )
    blocked = StrictBooleanField(required=False, help_text="Refuse every request naming them.")
