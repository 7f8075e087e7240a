"""Prices: exact money arithmetic, a price history looked up by time, and price rules."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from controlplane.audit.models import AuditEvent
from controlplane.billing.costs import request_cost_units
from controlplane.billing.models import ModelPrice
from controlplane.billing.money import amount_text, amount_to_units, token_cost_units
from controlplane.billing.selectors import price_book
from controlplane.billing.services import model_price_set


def test_token_costs_are_exact_to_the_last_digit():
    # 0.1 + 0.2 in floats is not 0.3; in units it is.
    a = token_cost_units(1, Decimal("0.1"))
    b = token_cost_units(1, Decimal("0.2"))
    assert amount_text(a + b) == "0.0000003"
    assert amount_text(token_cost_units(1_234_567, Decimal("2.5"))) == "3.0864175"
    assert amount_to_units(Decimal("10.00")) == token_cost_units(1_000_000, Decimal("10"))
    with pytest.raises(ValueError, match="at most 4 decimal places"):
        token_cost_units(1, Decimal("0.00001"))


def test_cached_prompt_tokens_cost_the_cached_input_price():
    price = ModelPrice(
        model="m",
        input_per_million=Decimal("1"),
        cached_input_per_million=Decimal("0.1"),
        output_per_million=Decimal("3"),
    )
    units = request_cost_units(price, prompt_tokens=1000, completion_tokens=100, cached_tokens=600)
    # 400 uncached at 1, 600 cached at 0.1, 100 out at 3 (per million)
    assert amount_text(units) == "0.00076"
    price.cached_input_per_million = None  # empty: cached tokens at the input price
    units = request_cost_units(price, prompt_tokens=1000, completion_tokens=0, cached_tokens=600)
    assert amount_text(units) == "0.001"
    assert request_cost_units(None, prompt_tokens=9, completion_tokens=9, cached_tokens=0) == 0


@pytest.mark.django_db
def test_the_price_in_effect_is_the_latest_that_started():
    now = timezone.now()
    first = model_price_set(
        model="m", input_per_million=Decimal("1"), output_per_million=Decimal("2")
    )
    later = model_price_set(
        model="m",
        input_per_million=Decimal("5"),
        output_per_million=Decimal("6"),
        effective_from=now + timedelta(hours=1),
    )
    book = price_book(models={"m", "unpriced"})
    assert book.at("m", now + timedelta(minutes=30)) == first
    assert book.at("m", now + timedelta(hours=2)) == later
    assert book.at("m", first.effective_from - timedelta(seconds=1)) is None
    assert book.at("unpriced", now) is None
    assert AuditEvent.objects.filter(action="model_price.set").count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"input_per_million": Decimal("-1")}, "must not be negative"),
        ({"output_per_million": Decimal("0.00001")}, "at most 4 decimal places"),
        ({"effective_from_ago": timedelta(days=1)}, "starts now or later"),
        ({"model": " "}, "needs a model name"),
    ],
)
def test_a_bad_price_is_refused_with_a_clear_message(changes, message):
    args = {"model": "m", "input_per_million": Decimal("1"), "output_per_million": Decimal("1")}
    ago = changes.pop("effective_from_ago", None)
    if ago is not None:
        args["effective_from"] = timezone.now() - ago
    with pytest.raises(ValidationError, match=message):
        model_price_set(**{**args, **changes})
    assert not ModelPrice.objects.exists()
