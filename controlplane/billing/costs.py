"""The cost of one request's tokens at a price (exact, in money.py's units)."""

from __future__ import annotations

from controlplane.billing.models import ModelPrice
from controlplane.billing.money import token_cost_units


def request_cost_units(
    price: ModelPrice | None, *, prompt_tokens: int, completion_tokens: int, cached_tokens: int
) -> int:
    """Uncached prompt tokens at the input price, cached ones at the cached-input price,
    completion tokens at the output price; nothing for a model without a price."""
    if price is None:
        return 0
    cached = min(max(0, cached_tokens), max(0, prompt_tokens))
    return (
        token_cost_units(max(0, prompt_tokens) - cached, price.input_per_million)
        + token_cost_units(cached, price.cached_input_price)
        + token_cost_units(max(0, completion_tokens), price.output_per_million)
    )
