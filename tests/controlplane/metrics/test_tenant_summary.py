"""Per-tenant figures for the dashboard: prefix-cache hit rate and TTFT percentiles."""

from __future__ import annotations

import pytest

from controlplane.metrics import atenant_metrics_summary, record_request, tenant_metrics_summary
from controlplane.metrics.tenant_summary import histogram_quantile


async def _finished(*, tenant, model="tiny", prompt, cached, ttft, queue=None):
    await record_request(
        model=model,
        tenant=tenant,
        finished_reason="stop",
        prompt_tokens=prompt,
        generation_tokens=4,
        e2e_latency=1.0,
        time_to_first_token=ttft,
        inter_token_latencies=[0.02] * 3,
        queue_time=queue,
        prefill_time=None,
        decode_time=None,
        cached_tokens=cached,
    )


def test_histogram_quantile_interpolates_like_promql():
    # 10 observations in (0, 0.1], 10 in (0.1, 0.5]: the median is the 0.1 bound, p75 half
    # way through the second bucket, p95 at 90% of it.
    cumulative = [(0.1, 10), (0.5, 20), (float("inf"), 20)]
    assert histogram_quantile(0.5, cumulative) == pytest.approx(0.1)
    assert histogram_quantile(0.75, cumulative) == pytest.approx(0.3)
    assert histogram_quantile(0.95, cumulative) == pytest.approx(0.46)
    # A rank in the +Inf bucket answers the highest finite bound, as PromQL does.
    assert histogram_quantile(0.99, [(0.1, 1), (float("inf"), 10)]) == 0.1
    assert histogram_quantile(0.5, [(0.1, 0), (float("inf"), 0)]) is None
    with pytest.raises(ValueError, match="quantile"):
        histogram_quantile(1.5, cumulative)


async def test_summary_per_tenant_over_every_model(redis_client):
    # acme: 3 requests over two models, 30 of 60 prompt tokens cached, fast first tokens.
    await _finished(tenant="acme", prompt=20, cached=16, ttft=0.015, queue=0.004)
    await _finished(tenant="acme", prompt=20, cached=14, ttft=0.015, queue=0.004)
    await _finished(tenant="acme", model="other", prompt=20, cached=0, ttft=0.015)
    # globex: nothing cached, slow first tokens.
    for _ in range(4):
        await _finished(tenant="globex", prompt=50, cached=0, ttft=3.0, queue=2.0)

    acme, globex = await atenant_metrics_summary()

    assert (acme.tenant, acme.num_requests) == ("acme", 3)
    assert (acme.prompt_tokens, acme.cached_prompt_tokens) == (60, 30)
    assert acme.prefix_cache_hit_rate == pytest.approx(0.5)
    assert 0.01 < acme.ttft_p50_s <= 0.02 and 0.01 < acme.ttft_p95_s <= 0.02
    assert (globex.tenant, globex.num_requests, globex.prefix_cache_hit_rate) == ("globex", 4, 0)
    assert 2.5 < globex.ttft_p50_s <= 5.0 and 2.5 < globex.ttft_p95_s <= 5.0
    # Queue wait: what fair share changes first when one tenant floods the engine.
    assert acme.queue_p50_s <= 0.3 and 1.5 < globex.queue_p50_s <= 2.0

    (only_other,) = tenant_metrics_summary(model="other")
    assert (only_other.tenant, only_other.num_requests, only_other.prompt_tokens) == (
        "acme",
        1,
        20,
    )


def test_summary_is_empty_before_any_traffic(redis_client):
    assert tenant_metrics_summary() == []
