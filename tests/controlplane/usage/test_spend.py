"""Spend: every usage record priced when written, exact to the last digit, per key, tenant,
model and day; a price change reaches only the requests that finished after it."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async

from controlplane.billing.services import model_price_set
from controlplane.usage.events import encode_event, usage_queue_key
from controlplane.usage.models import DailyUsage, UsageRecord
from controlplane.usage.services import usage_flush
from controlplane.usage.spend import (
    daily_spend,
    month_period,
    spend_by_key,
    spend_by_model,
    spend_for_key,
    spend_for_tenant,
)
from tests.controlplane.usage.finished_requests import finish_request, key_usage_event

pytestmark = pytest.mark.django_db(transaction=True)

PRICES = {  # per million tokens: input, cached input (None: the input price), output
    "alpha": (Decimal("0.15"), Decimal("0.075"), Decimal("0.6")),
    "beta": (Decimal("2.5"), None, Decimal("10")),
}
MILLION = Decimal(1_000_000)


def _expected_cost(model: str, prompt: int, cached: int, completion: int) -> Decimal:
    """The price list applied by hand, in Decimal (independent of the billing code)."""
    input_price, cached_price, output_price = PRICES[model]
    cached_price = input_price if cached_price is None else cached_price
    return (
        (prompt - cached) * input_price + cached * cached_price + completion * output_price
    ) / MILLION


def _set_prices() -> None:
    for model, (input_price, cached_price, output_price) in PRICES.items():
        model_price_set(
            model=model,
            input_per_million=input_price,
            cached_input_per_million=cached_price,
            output_per_million=output_price,
        )


def test_a_thousand_requests_give_the_exact_spend_per_key_tenant_and_model(
    make_tenant, make_key, redis_client
):
    _set_prices()
    acme, globex = make_tenant("Acme"), make_tenant("Globex")
    keys = [make_key(acme)[0], make_key(acme)[0], make_key(globex)[0]]
    rng = random.Random(28)
    expected_key: dict[str, Decimal] = {}
    expected_tenant: dict[int, Decimal] = {}
    expected_model: dict[str, Decimal] = {}
    events = []
    for i in range(1000):
        key = keys[i % 3]
        model = rng.choice(sorted(PRICES))
        prompt, completion = rng.randint(1, 4000), rng.randint(0, 1500)
        cached = rng.randint(0, prompt)
        events.append(
            key_usage_event(
                key,
                model=model,
                prompt_tokens=prompt,
                cached_tokens=cached,
                completion_tokens=completion,
            )
        )
        cost = _expected_cost(model, prompt, cached, completion)
        expected_key[key.prefix] = expected_key.get(key.prefix, Decimal(0)) + cost
        expected_tenant[key.tenant_id] = expected_tenant.get(key.tenant_id, Decimal(0)) + cost
        if key.tenant_id == acme.pk:
            expected_model[model] = expected_model.get(model, Decimal(0)) + cost
    # Queued as API processes queue them (admission.finish), in one push.
    redis_client.rpush(usage_queue_key(), *map(encode_event, events))
    assert usage_flush() == 1000

    def spend():
        start, end = month_period()
        return (
            {t: spend_for_tenant(tenant_id=t, start=start, end=end) for t in expected_tenant},
            {
                k.prefix: spend_for_key(
                    tenant_id=k.tenant_id, key_prefix=k.prefix, start=start, end=end
                )
                for k in keys
            },
            spend_by_key(tenant_id=acme.pk, start=start, end=end),
            spend_by_model(tenant_id=acme.pk, start=start, end=end),
            daily_spend(tenant_id=acme.pk, start=start, end=end),
        )

    per_tenant, per_key, acme_keys, acme_models, acme_days = spend()
    assert {t: s.cost for t, s in per_tenant.items()} == expected_tenant
    assert {k: s.cost for k, s in per_key.items()} == expected_key
    assert {k: s.cost for k, s in acme_keys.items()} == {
        k.prefix: expected_key[k.prefix] for k in keys[:2]
    }
    assert {m: s.cost for m, s in acme_models.items()} == expected_model
    assert sum(s.cost for _, s in acme_days) == expected_tenant[acme.pk]
    assert per_tenant[acme.pk].num_requests == 667 and per_tenant[globex.pk].num_requests == 333
    # The records carry the same cost as their rollups.
    records = list(UsageRecord.objects.all())
    assert sum((r.cost for r in records), Decimal(0)) == sum(expected_tenant.values())
    assert all(r.cost_units > 0 for r in records)


async def test_a_price_change_reaches_only_requests_that_finished_after_it(make_tenant, make_key):
    tenant = await sync_to_async(make_tenant)("Repriced")
    _, secret = await sync_to_async(make_key)(tenant)
    await sync_to_async(model_price_set)(
        model="tiny", input_per_million=Decimal("1"), output_per_million=Decimal("2")
    )
    await finish_request(secret, prompt=1000, completion=500, cached=0)
    await sync_to_async(usage_flush)()
    # Finished before the change, but written after it: still the old price.
    await finish_request(secret, prompt=1000, completion=500, cached=0)
    await sync_to_async(model_price_set)(
        model="tiny", input_per_million=Decimal("10"), output_per_million=Decimal("20")
    )
    await finish_request(secret, prompt=1000, completion=500, cached=0)
    await sync_to_async(usage_flush)()

    costs = [r.cost async for r in UsageRecord.objects.order_by("created_at")]
    assert costs == [Decimal("0.002"), Decimal("0.002"), Decimal("0.02")]
    day = await DailyUsage.objects.aget(tenant=tenant)
    assert day.cost == Decimal("0.024")


async def test_usage_of_a_model_without_a_price_costs_nothing(make_tenant, make_key):
    tenant = await sync_to_async(make_tenant)("Unpriced")
    _, secret = await sync_to_async(make_key)(tenant)
    await finish_request(secret, prompt=100, completion=10)
    await sync_to_async(usage_flush)()
    record = await UsageRecord.objects.aget(tenant=tenant)
    assert (record.prompt_tokens, record.cost) == (100, Decimal(0))
