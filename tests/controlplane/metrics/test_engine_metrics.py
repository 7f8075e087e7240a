"""Engine-level metrics: rendered from the live engines' status records in Redis."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest

from controlplane.metrics import PlatformCollector
from engine import protocol
from engine.protocol import EngineStatus, Keys
from tests.support.metrics_scrape import Scrape, scrape


def _publish(redis_client, status: EngineStatus, *, ttl_s: int = 5) -> None:
    keys = Keys()
    redis_client.sadd(keys.engines(), protocol.engine_member(status.model, status.engine_id))
    redis_client.set(
        keys.status(status.model, status.engine_id), protocol.encode_status(status), ex=ttl_s
    )


def _status(model: str, engine_id: str, **fields) -> EngineStatus:
    return EngineStatus(engine_id=engine_id, model=model, updated_at=time.time(), **fields)


def test_each_live_engine_is_one_series_with_its_status_values(redis_client):
    _publish(
        redis_client,
        _status(
            "tiny",
            "host-1-a",
            num_running=3,
            num_waiting=5,
            kv_cache_usage=0.25,
            prompt_tokens_total=1200,
            generation_tokens_total=345,
            prefix_cache_queries=1200,
            prefix_cache_hits=640,
            num_preemptions=2,
            num_steps_inside=6,
            num_handed_over=11,
            num_idle_announcements=4,
            spec_decode_num_drafts=40,
            spec_decode_num_draft_tokens=200,
            spec_decode_num_accepted_tokens=150,
        ),
    )
    _publish(redis_client, _status("tiny", "host-2-b", num_running=1, generation_tokens_total=7))
    _publish(redis_client, _status("other", "host-3-c", num_waiting=9))

    s = scrape()
    a = {"model_name": "tiny", "engine": "host-1-a"}
    assert s.types["vllm:num_requests_running"] == "gauge"
    assert s.types["vllm:generation_tokens"] == "counter"
    assert s.value("vllm:num_requests_running", **a) == 3
    assert s.value("vllm:num_requests_waiting", **a) == 5
    assert s.value("vllm:kv_cache_usage_perc", **a) == 0.25
    assert s.value("vllm:prompt_tokens_total", **a) == 1200
    assert s.value("vllm:generation_tokens_total", **a) == 345
    assert s.value("vllm:prefix_cache_queries_total", **a) == 1200
    assert s.value("vllm:prefix_cache_hits_total", **a) == 640
    assert s.value("platform:engine_requests_handed_over_total", **a) == 11
    assert s.value("platform:engine_idle_announcements_total", **a) == 4
    assert s.value("vllm:num_preemptions_total", **a) == 2
    assert s.value("platform:engine_steps_inside_total", **a) == 6
    assert s.value("vllm:spec_decode_num_drafts_total", **a) == 40
    assert s.value("vllm:spec_decode_num_draft_tokens_total", **a) == 200
    assert s.value("vllm:spec_decode_num_accepted_tokens_total", **a) == 150
    assert s.value("vllm:spec_decode_draft_acceptance_rate", **a) == 0.75
    assert s.value("vllm:num_requests_running", model_name="tiny", engine="host-2-b") == 1
    assert s.value("vllm:generation_tokens_total", model_name="tiny", engine="host-2-b") == 7
    assert s.value("vllm:num_requests_waiting", model_name="other", engine="host-3-c") == 9
    assert len(s.series("vllm:num_requests_running")) == 3


def test_an_engine_whose_status_expired_drops_out(redis_client):
    _publish(redis_client, _status("tiny", "alive", num_running=1))
    _publish(redis_client, _status("tiny", "dead", num_running=4))
    redis_client.delete(Keys().status("tiny", "dead"))  # what its TTL does when it stops

    s = scrape()
    assert s.series("vllm:num_requests_running") == [{"model_name": "tiny", "engine": "alive"}]


def test_no_engines_still_declares_every_family(redis_client):
    s = scrape()
    for name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:prompt_tokens"):
        assert name in s.types
    assert s.series("vllm:num_requests_running") == []


def test_an_unreadable_status_record_is_skipped(redis_client):
    _publish(redis_client, _status("tiny", "good", num_running=2))
    keys = Keys()
    redis_client.sadd(keys.engines(), protocol.engine_member("tiny", "garbled"))
    redis_client.set(keys.status("tiny", "garbled"), b"{not json", ex=5)

    assert scrape().series("vllm:num_requests_running") == [
        {"model_name": "tiny", "engine": "good"}
    ]


def test_redis_down_leaves_the_families_empty_instead_of_failing_the_scrape(caplog):
    registry = CollectorRegistry()
    registry.register(PlatformCollector(redis_url="redis://127.0.0.1:1/0", prefix="llmp"))
    s = Scrape(generate_latest(registry).decode())
    assert "vllm:num_requests_running" in s.types and s.samples == {}
    assert "cannot read Redis" in caplog.text


def test_lora_requests_info_names_running_and_waiting_adapters(redis_client):
    _publish(
        redis_client,
        _status(
            "tiny",
            "host-1-a",
            running_lora_adapters=["sql-bot", "support"],
            waiting_lora_adapters=["legal"],
            max_lora=4,
        ),
    )
    s = scrape()
    assert s.types["vllm:lora_requests_info"] == "gauge"
    [labels] = s.series("vllm:lora_requests_info")
    assert labels == {
        "model_name": "tiny",
        "engine": "host-1-a",
        "max_lora": "4",
        "waiting_lora_adapters": "legal",
        "running_lora_adapters": "sql-bot,support",
    }
    assert s.value("vllm:lora_requests_info", **labels) > 0  # the report's timestamp
