"""Money as exact integers: amounts are stored and summed in units of 10^-10 of the currency.

Prices are set per million tokens with at most four decimal places, so the cost of any token
count is a whole number of units, and sums stay exact on every database (SQLite keeps only 15
significant digits of a decimal column and sums them as floats). A 64-bit column holds
spend up to about 920 million of the currency.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings

COST_DECIMAL_PLACES = 10
UNITS_PER_CURRENCY = 10**COST_DECIMAL_PLACES
PRICE_DECIMAL_PLACES = 4  # per million tokens
TOKENS_PER_PRICE = 1_000_000
# One unit of a price (0.0001 per million tokens) is this many cost units per token.
_UNITS_PER_PRICE_STEP = UNITS_PER_CURRENCY // (10**PRICE_DECIMAL_PLACES * TOKENS_PER_PRICE)


def price_steps(price_per_million: Decimal) -> int:
    """A price per million tokens in its smallest steps (raises ValueError on finer prices)."""
    steps = Decimal(price_per_million).scaleb(PRICE_DECIMAL_PLACES)
    if steps != steps.to_integral_value():
        raise ValueError(
            f"a price has at most {PRICE_DECIMAL_PLACES} decimal places: {price_per_million}"
        )
    return int(steps)


def token_cost_units(tokens: int, price_per_million: Decimal) -> int:
    """The exact cost of ``tokens`` at a price per million tokens, in units."""
    return int(tokens) * price_steps(price_per_million) * _UNITS_PER_PRICE_STEP


def units_to_amount(units: int) -> Decimal:
    """Units as an exact Decimal amount of the currency (ten decimal places)."""
    return Decimal(int(units)).scaleb(-COST_DECIMAL_PLACES)


def amount_text(units: int) -> str:
    """The exact amount as plain decimal text without trailing zeros ("0.0123", "10")."""
    text = format(units_to_amount(units), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def amount_to_units(amount: Decimal) -> int:
    """An amount of the currency (a budget) in units, rounded half up to the unit."""
    return int(Decimal(amount).scaleb(COST_DECIMAL_PLACES).quantize(1, rounding=ROUND_HALF_UP))


def currency() -> str:
    return settings.BILLING_CURRENCY


def format_amount(units: int, *, places: int = 4) -> str:
    """For people: "12.3456 USD" (rounded for display; the stored value stays exact)."""
    amount = units_to_amount(units).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return f"{amount} {currency()}"
