"""The engines' adapter registry is rewritten from the database (Celery beat, serve's start):
a lost write or a Redis restart heals within one beat."""

from __future__ import annotations

import pytest
from django.conf import settings

from controlplane.adapters import engine_sync, services
from controlplane.adapters.models import Adapter
from controlplane.adapters.tasks import reconcile_adapter_registry
from engine import protocol

pytestmark = pytest.mark.django_db


@pytest.fixture
def ready(base_model, adapter_dir, redis_client, django_capture_on_commit_callbacks):
    """Adapter "one", ready and published (its control message included)."""
    with django_capture_on_commit_callbacks(execute=True):
        adapter = services.adapter_register(
            path=adapter_dir, name="one", base=base_model, enqueue=False
        )
        return services.adapter_validate(adapter_id=adapter.pk)


def _control(redis_client, model="tiny-llama"):
    entries = redis_client.xrange(protocol.Keys().control(model))
    return [protocol.decode_control(fields[protocol.FIELD]) for _, fields in entries]


def test_the_beat_task_restores_a_deleted_registry_hash(ready, redis_client):
    keys = protocol.Keys()
    redis_client.delete(keys.adapters("tiny-llama"))  # a lost write, or Redis restarted empty
    before = len(_control(redis_client))

    assert reconcile_adapter_registry() == 1  # what Celery beat runs
    published = engine_sync.published_adapters(model="tiny-llama")
    assert published == {
        "one": protocol.AdapterRef(name="one", checksum=ready.checksum, path=ready.path)
    }
    # Engines hear of it at once (they would also find it at their next reconcile).
    (message,) = _control(redis_client)[before:]
    assert message == protocol.LoadAdapter(adapter=published["one"])
    assert reconcile_adapter_registry() == 0, "nothing to repair the second time"


def test_stale_and_changed_entries_are_repaired(ready, redis_client):
    keys = protocol.Keys()
    key = keys.adapters("tiny-llama")
    stale = protocol.AdapterRef(name="gone", checksum="c0ffee", path="/nowhere")
    redis_client.hset(key, "gone", protocol.encode(stale))
    old = protocol.AdapterRef(name="one", checksum="old", path=ready.path)
    redis_client.hset(key, "one", protocol.encode(old))
    redis_client.hset(keys.adapters("deleted-model"), "x", protocol.encode(stale))

    assert reconcile_adapter_registry() == 3
    assert engine_sync.published_adapters(model="tiny-llama")["one"].checksum == ready.checksum
    assert set(engine_sync.published_adapters(model="tiny-llama")) == {"one"}
    assert not redis_client.exists(keys.adapters("deleted-model"))
    kinds = {(type(m).__name__, getattr(m, "name", None)) for m in _control(redis_client)}
    assert ("UnloadAdapter", "gone") in kinds


def test_adapters_being_validated_are_left_to_their_validation(ready, redis_client):
    Adapter.objects.filter(pk=ready.pk).update(state=Adapter.State.VALIDATING)
    assert reconcile_adapter_registry() == 0
    assert "one" in engine_sync.published_adapters(model="tiny-llama")
    Adapter.objects.filter(pk=ready.pk).update(state=Adapter.State.FAILED)
    assert reconcile_adapter_registry() == 1
    assert engine_sync.published_adapters(model="tiny-llama") == {}


def test_beat_runs_the_reconcile():
    tasks = {entry["task"]: entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert tasks["adapters.reconcile_registry"] <= 10
