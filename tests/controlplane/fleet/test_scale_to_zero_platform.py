"""Scale to zero against real processes: the session's Redis, one SQLite file, Daphne and one
node agent running real engines of two tiny checkpoints, driven with the official openai SDK.

The agent offers 1 GiB, and each replica is estimated at 0.75 GiB plus its tiny weights, so
only one engine fits at a time. Deployments, made once the agent and Daphne are up: ``tiny``
(one replica, scale to zero after 3 s idle) and ``tiny2`` (scale to zero, at 0). In order:
``tiny`` unloads once idle; concurrent requests for it wake it once and are all answered, and
the cold start shows on /metrics and in the audit log; with ``tiny`` loaded again (a long
idle timeout this time), a request for ``tiny2`` evicts it and is answered.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.fleet_platform import Agent, AgentTiming, fleet_platform

pytestmark = pytest.mark.slow

AGENT = Agent("solo", memory_gb=1)
TIMING = AgentTiming(node_ttl=3, max_restarts=1, backoff=0.2, drain_timeout=2)
LOAD_TIMEOUT_S = 180  # an engine of a tiny model loads in seconds; this machine is shared


@pytest.fixture(scope="module")
def platform(tmp_path_factory, checkpoints):
    workdir = tmp_path_factory.mktemp("scale-to-zero")
    models = {"tiny": checkpoints.get("llama"), "tiny2": checkpoints.get("llama", seed=1)}
    with fleet_platform(workdir, models=models, agents=[AGENT], timing=TIMING) as platform:
        platform.deploy(
            ("tiny", "--scale-to-zero", "--replicas", "1", "--idle-timeout", "3"),
            ("tiny2", "--scale-to-zero", "--replicas", "0", "--idle-timeout", "600"),
        )
        yield platform


def test_an_idle_scale_to_zero_deployment_unloads(platform):
    platform.wait(lambda: platform.ready("tiny"), timeout=LOAD_TIMEOUT_S, what="tiny ready")
    platform.wait(
        lambda: [r["state"] for r in platform.replicas("tiny")] == ["stopped"],
        timeout=60,
        what="tiny unloaded after its 3 s idle timeout",
    )
    assert platform.wanted("tiny") == 0
    (unload,) = platform.audit("deployment.unload")
    assert unload["target_repr"] == "tiny" and unload["actor_label"].startswith("system")
    assert unload["details"]["idle_s"] >= 3


async def _three_requests(sdk) -> list[str]:
    """A chat completion, a streamed one and a text completion, all at once."""

    async def chat() -> str:
        answer = await sdk.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        return answer.choices[0].finish_reason

    async def streamed() -> str:
        stream = await sdk.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hey"}], max_tokens=4, stream=True
        )
        reasons = [c.choices[0].finish_reason async for c in stream if c.choices]
        return reasons[-1]

    async def completion() -> str:
        answer = await sdk.completions.create(model="tiny", prompt="once upon", max_tokens=4)
        return answer.choices[0].finish_reason

    return list(await asyncio.gather(chat(), streamed(), completion()))


def test_requests_for_an_unloaded_model_wake_it_once_and_are_answered(platform):
    assert platform.wanted("tiny") == 0 and not platform.ready("tiny")
    finish_reasons = asyncio.run(_three_requests(platform.async_sdk(timeout=LOAD_TIMEOUT_S)))
    assert finish_reasons == ["length", "length", "length"]
    (wake,) = platform.audit("deployment.wake")  # three requests, one wake
    assert wake["target_repr"] == "tiny" and wake["details"]["replicas"] == [0, 1]

    def counted() -> bool:
        return ("platform:cold_starts_total", frozenset({("model_name", "tiny")})) in (
            platform.metrics().samples
        )

    platform.wait(counted, timeout=30, what="the cold start on /metrics")
    scrape = platform.metrics()
    (cold_start,) = platform.audit("deployment.cold_start")
    seconds = cold_start["details"]["seconds"]
    assert scrape.value("platform:cold_starts_total", model_name="tiny") == 1
    assert scrape.value("platform:cold_start_seconds_count", model_name="tiny") == 1
    assert scrape.value("platform:cold_start_seconds_sum", model_name="tiny") == pytest.approx(
        seconds, abs=0.01
    )
    assert 0 < seconds < LOAD_TIMEOUT_S
    assert cold_start["details"]["node"] == "solo"


def test_a_model_that_does_not_fit_evicts_the_idle_one(platform):
    stays_loaded = ("tiny", "--scale-to-zero", "--replicas", "1", "--idle-timeout", "600")
    platform.deploy(stays_loaded)
    platform.wait(lambda: platform.ready("tiny"), timeout=LOAD_TIMEOUT_S, what="tiny ready")
    sdk = platform.sdk(timeout=LOAD_TIMEOUT_S)
    answer = sdk.chat.completions.create(
        model="tiny2", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert answer.choices[0].finish_reason == "length"
    (evict,) = platform.audit("deployment.evict")
    assert evict["target_repr"] == "tiny"
    assert evict["details"]["for"] == "tiny2" and evict["details"]["node"] == "solo"
    assert platform.wanted("tiny") == 0
    # The API admits a request once the engine's status record is live; its agent marks the
    # replica ready at its next step.
    platform.wait(lambda: platform.ready("tiny2"), timeout=30, what="tiny2's replica ready")
    assert [r["node"] for r in platform.replicas("tiny2") if r["state"] == "ready"] == ["solo"]
