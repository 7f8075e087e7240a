"""Scale to zero in-process: the pure rules (idle, which deployment to evict); the wake, idle
unload, eviction and cold-start count through the services and the reconciler; and the API's
wait for a woken engine (``EngineCapacity.check``, and ``check_served`` for embeddings), on the test database and a real Redis with
stand-in engine status records (test_scale_to_zero_platform.py runs real processes)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from controlplane.audit.models import AuditEvent
from controlplane.deployments.models import ServedModel
from controlplane.fleet import services
from controlplane.fleet.agent_writes import node_register
from controlplane.fleet.cold_starts import cold_start_tallies
from controlplane.fleet.demand import deployment_wake, last_used_key, touch_used
from controlplane.fleet.models import Deployment, Replica
from controlplane.fleet.placement import GIB, Need
from controlplane.fleet.reconciler import reconcile
from controlplane.fleet.scale_to_zero import (
    EVICTION_MIN_IDLE_S,
    Activity,
    NodeLoad,
    Placed,
    choose_eviction,
    fits_after_drains,
    is_idle,
)
from engine.protocol import Keys
from inference.transport.engine_capacity import EngineCapacity, EngineUnavailable
from tests.support.engine_status import publish_engine_status

State = Replica.State
NOW = 1_000_000.0


# ---------------------------------------------------------------- pure rules


def test_idle_after_the_timeout_unless_its_engines_have_work():
    quiet = Activity(last_active=NOW - 30)
    assert is_idle(quiet, now=NOW, idle_timeout_s=30)
    assert not is_idle(quiet, now=NOW, idle_timeout_s=31)
    assert not is_idle(Activity(last_active=NOW - 3600, busy=True), now=NOW, idle_timeout_s=30)


def _gib(n: float) -> Need:
    return Need(memory_bytes=int(n * GIB))


def test_eviction_picks_the_least_recently_used_idle_deployment_that_makes_room():
    loads = [
        NodeLoad("a", 4 * GIB, placed=[Placed("old", _gib(2)), Placed("older", _gib(1))]),
        NodeLoad("b", 4 * GIB, placed=[Placed("oldest", _gib(1)), Placed("other", _gib(2.5))]),
    ]
    candidates = {
        "old": Activity(NOW - 100),
        "older": Activity(NOW - 200),
        "oldest": Activity(NOW - 300),
        "busy": Activity(NOW - 900, busy=True),
    }
    # 3 GiB: freeing "oldest" (b) or "older" (a) leaves 1.5 or 2 GiB free; only "old" (a)
    # makes room, so the older ones stay.
    choice = choose_eviction(_gib(3), loads, candidates, now=NOW)
    assert (choice.deployment, choice.node) == ("old", "a")
    # 1.5 GiB fits wherever one of them leaves: the least recently used goes.
    choice = choose_eviction(_gib(1.5), loads, candidates, now=NOW)
    assert (choice.deployment, choice.node) == ("oldest", "b")


def test_eviction_spares_the_recently_used_the_requester_and_a_node_without_the_labels():
    loads = [NodeLoad("a", 2 * GIB, labels={"zone": "a"}, placed=[Placed("x", _gib(2))])]
    recent = {"x": Activity(NOW - EVICTION_MIN_IDLE_S / 2)}
    assert choose_eviction(_gib(2), loads, recent, now=NOW) is None
    idle = {"x": Activity(NOW - 60)}
    assert choose_eviction(_gib(2), loads, idle, now=NOW, requester="x") is None
    elsewhere = Need(memory_bytes=GIB, selector={"zone": "b"})
    assert choose_eviction(elsewhere, loads, idle, now=NOW) is None
    assert choose_eviction(_gib(2), loads, idle, now=NOW).deployment == "x"


def test_room_that_draining_engines_will_free_is_waited_for():
    load = NodeLoad("a", 2 * GIB, placed=[Placed("gone", _gib(2), draining=True)])
    assert fits_after_drains(_gib(2), [load])
    assert not fits_after_drains(_gib(3), [load])


# ---------------------------------------------------------------- services and reconciler


@pytest.fixture
def models():
    def served(name):
        return ServedModel.objects.create(
            name=name, path="/nowhere", architecture="LlamaForCausalLM", num_parameters=1000
        )

    return served("m1"), served("m2")


def _set_back(deployment: Deployment, seconds: float, client) -> None:
    """As if nothing had happened to ``deployment`` for ``seconds``."""
    past = timezone.now() - timedelta(seconds=seconds)
    Deployment.objects.filter(pk=deployment.pk).update(updated_at=past)
    deployment.replicas_set.update(updated_at=past)
    touch_used(client, deployment.served_model.name, time.time() - seconds)


def _ready(deployment: Deployment) -> None:
    deployment.replicas_set.filter(node__isnull=False).update(state=State.READY)


def _actions() -> list[str]:
    return list(AuditEvent.objects.order_by("pk").values_list("action", flat=True))


@pytest.mark.django_db
def test_a_wake_raises_zero_to_one_once_and_leaves_other_models_refused(models, redis_client):
    services.deployment_deploy(name="d1", model="m1", replicas=0, scale_to_zero=True)
    services.deployment_deploy(name="d2", model="m2", replicas=0)  # not scale to zero
    first, second = deployment_wake(model="m1"), deployment_wake(model="m1")
    assert (first.deployment, first.woke, second.woke) == ("d1", True, False)
    assert Deployment.objects.get(name="d1").replicas == 1
    assert deployment_wake(model="m2") is None
    assert deployment_wake(model="unknown") is None
    wake = AuditEvent.objects.get(action="deployment.wake")
    assert wake.actor_label.startswith("system") and wake.details["replicas"] == [0, 1]


@pytest.mark.django_db
def test_an_idle_deployment_unloads_and_a_used_or_busy_one_stays(models, redis_client):
    node_register(redis_client, name="a", ttl_s=30, memory_bytes=16 * GIB)
    d1 = services.deployment_deploy(
        name="d1", model="m1", replicas=1, scale_to_zero=True, idle_timeout_s=60
    )
    d2 = services.deployment_deploy(
        name="d2", model="m2", replicas=1, scale_to_zero=True, idle_timeout_s=60
    )
    reconcile(redis_client)
    _ready(d1), _ready(d2)
    _set_back(d1, 61, redis_client)
    _set_back(d2, 61, redis_client)
    prefix = settings.PLATFORM_REDIS_PREFIX
    publish_engine_status(redis_client, prefix=prefix, model="m2")  # idle engine: no work
    reconcile(redis_client)
    assert [r.state for r in d1.replicas_set.all()] == [State.DRAINING]
    assert [r.state for r in d2.replicas_set.all()] == [State.DRAINING]
    unload = AuditEvent.objects.filter(action="deployment.unload").first()
    assert unload.details["idle_timeout_s"] == 60 and unload.details["idle_s"] >= 60

    services.deployment_scale(name="d1", replicas=1)  # back, used recently this time
    reconcile(redis_client)
    _ready(d1)
    _set_back(d1, 61, redis_client)
    touch_used(redis_client, "m1")
    reconcile(redis_client)
    assert Deployment.objects.get(name="d1").replicas == 1
    _set_back(d1, 61, redis_client)
    status = publish_engine_status(redis_client, prefix=prefix, model="m1", engine_id="e1")
    _make_busy(redis_client, status)
    reconcile(redis_client)
    assert Deployment.objects.get(name="d1").replicas == 1  # a long request keeps it loaded


def _make_busy(client, status_key: str) -> None:
    from engine import protocol

    status = protocol.decode_status(client.get(status_key))
    busy = protocol.EngineStatus(**{**_fields(status), "num_running": 1})
    client.set(status_key, protocol.encode_status(busy), px=30_000)


def _fields(status) -> dict:
    return {name: getattr(status, name) for name in status.__struct_fields__}


@pytest.mark.django_db
def test_a_model_that_fits_nowhere_evicts_the_idle_one_then_is_placed(models, redis_client):
    # 2 GiB node; each replica needs 0.5 GiB overhead + 1 GiB KV cache: one at a time.
    node_register(redis_client, name="small", ttl_s=30, memory_bytes=2 * GIB)
    old = services.deployment_deploy(
        name="d1", model="m1", replicas=1, scale_to_zero=True, kv_cache_gb=1.0
    )
    reconcile(redis_client)
    _ready(old)
    _set_back(old, EVICTION_MIN_IDLE_S + 1, redis_client)
    services.deployment_deploy(name="d2", model="m2", replicas=0, scale_to_zero=True)
    assert deployment_wake(model="m2").woke
    reconcile(redis_client)
    new = Deployment.objects.get(name="d2")
    assert [(r.state, r.node) for r in new.replicas_set.all()] == [(State.PENDING, None)]
    assert new.replicas_set.get().reason == "waiting for d1 (evicted) to drain on small"
    evicted = old.replicas_set.get()
    assert (evicted.state, evicted.reason) == (State.DRAINING, "evicted for d2")
    assert Deployment.objects.get(name="d1").replicas == 0
    event = AuditEvent.objects.get(action="deployment.evict")
    assert event.details["for"] == "d2" and event.details["node"] == "small"

    reconcile(redis_client)  # still draining: nothing more is evicted, nothing placed
    assert new.replicas_set.get().node is None
    evicted.state = State.STOPPED  # its agent saw the engine exit
    evicted.save()
    reconcile(redis_client)
    assert new.replicas_set.get().node.name == "small"


@pytest.mark.django_db
def test_a_woken_deployment_that_becomes_ready_counts_one_cold_start(models, redis_client):
    node_register(redis_client, name="a", ttl_s=30, memory_bytes=16 * GIB)
    services.deployment_deploy(name="d1", model="m1", replicas=0, scale_to_zero=True)
    deployment_wake(model="m1")
    reconcile(redis_client)
    assert cold_start_tallies(redis_client) == []  # placed, not ready yet
    deployment = Deployment.objects.get(name="d1")
    _ready(deployment)
    reconcile(redis_client)
    reconcile(redis_client)
    (tally,) = cold_start_tallies(redis_client)
    event = AuditEvent.objects.get(action="deployment.cold_start")
    assert (tally.model, tally.count) == ("m1", 1)
    assert tally.total_seconds == pytest.approx(event.details["seconds"], abs=0.01)
    assert event.details["node"] == "a" and event.details["replica"]
    assert tally.cumulative[-1] == (float("inf"), 1)


@pytest.mark.django_db
def test_the_idle_clock_starts_when_the_engine_is_ready(models, redis_client):
    node_register(redis_client, name="a", ttl_s=30, memory_bytes=16 * GIB)
    d1 = services.deployment_deploy(
        name="d1", model="m1", replicas=1, scale_to_zero=True, idle_timeout_s=60
    )
    reconcile(redis_client)
    d1.replicas_set.update(state=State.LOADING)  # a slow load, longer than the idle timeout
    _set_back(d1, 61, redis_client)
    reconcile(redis_client)
    assert Deployment.objects.get(name="d1").replicas == 1
    _ready(d1)
    _set_back(d1, 61, redis_client)
    reconcile(redis_client)
    assert Deployment.objects.get(name="d1").replicas == 0


# ---------------------------------------------------------------- the API's wait


@pytest.fixture
async def capacity(redis_server, redis_client):
    client = aioredis.Redis.from_url(redis_server.url)
    yield EngineCapacity(
        client, Keys(settings.PLATFORM_REDIS_PREFIX), max_waiting=8, wake_timeout_s=20
    )
    await client.aclose()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["generation", "embeddings"])
async def test_a_request_waits_for_the_engine_its_wake_starts(models, redis_client, capacity, kind):
    if kind == "embeddings":  # a pooling engine's model: checked by check_served
        model = "minilm"
        await sync_to_async(ServedModel.objects.create)(
            name=model, path="/nowhere", architecture="BertModel", num_parameters=1000
        )
        check = capacity.check_served
    else:
        model, check = "m1", capacity.check
    await sync_to_async(services.deployment_deploy)(
        name="d1", model=model, replicas=0, scale_to_zero=True
    )
    waiting = asyncio.create_task(check(model))
    await asyncio.sleep(1.5)
    assert not waiting.done()
    assert (await sync_to_async(Deployment.objects.get)(name="d1")).replicas == 1
    publish_engine_status(redis_client, prefix=settings.PLATFORM_REDIS_PREFIX, model=model)
    await asyncio.wait_for(waiting, timeout=10)  # admitted: the engine is live
    # Its use is recorded: the idle clock does not unload a model in use.
    assert redis_client.get(last_used_key(model)) is not None
    with pytest.raises(EngineUnavailable, match="no engine is serving model 'other'"):
        await check("other")  # no scale-to-zero deployment: refused at once


@pytest.mark.django_db(transaction=True)
async def test_the_wait_ends_on_disconnect_or_at_its_bound(models, redis_client, capacity):
    await sync_to_async(services.deployment_deploy)(
        name="d1", model="m1", replicas=0, scale_to_zero=True
    )
    waiting = asyncio.create_task(capacity.check("m1"))
    await asyncio.sleep(1.0)
    waiting.cancel()  # what Django does to the view's task when the client disconnects
    with pytest.raises(asyncio.CancelledError):
        await waiting
    capacity.cold_starts.timeout_s = 1.0
    with pytest.raises(EngineUnavailable, match="not ready within 1 s"):
        await capacity.check("m1")
    with pytest.raises(EngineUnavailable, match="no engine is serving model 'm2'"):
        await capacity.check("m2")  # no scale-to-zero deployment: refused at once, as before


@pytest.mark.django_db
def test_a_cold_start_counts_once_ready_and_a_wake_undone_before_counts_none(models, redis_client):
    node_register(redis_client, name="a", ttl_s=30, memory_bytes=16 * GIB)
    services.deployment_deploy(name="d1", model="m1", replicas=0, scale_to_zero=True)
    services.deployment_deploy(name="d2", model="m2", replicas=0, scale_to_zero=True)
    deployment_wake(model="m1"), deployment_wake(model="m2")
    reconcile(redis_client)
    _ready(Deployment.objects.get(name="d1"))
    services.deployment_scale(name="d1", replicas=0)  # ready, then scaled down at once
    services.deployment_scale(name="d2", replicas=0)  # scaled down while still loading
    reconcile(redis_client)
    _ready(Deployment.objects.get(name="d2"))  # a late ready of the undone wake
    reconcile(redis_client)
    assert [(t.model, t.count) for t in cold_start_tallies(redis_client)] == [("m1", 1)]


@pytest.mark.django_db(transaction=True)
async def test_a_zero_wait_turns_load_on_demand_off(models, redis_client, capacity):
    await sync_to_async(services.deployment_deploy)(
        name="d1", model="m1", replicas=0, scale_to_zero=True
    )
    capacity.cold_starts.timeout_s = 0  # FLEET_WAKE_TIMEOUT_S=0
    with pytest.raises(EngineUnavailable, match="no engine is serving model 'm1'"):
        await capacity.check("m1")
    assert (await sync_to_async(Deployment.objects.get)(name="d1")).replicas == 0
    assert redis_client.get(last_used_key("m1")) is not None  # the idle clock still runs
