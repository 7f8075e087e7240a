"""The engine's adapter registry: reconcile with the control plane's hash, back off from
adapters that fail to load, never let a stale snapshot undo a newer control message."""

from __future__ import annotations

import logging
import time

import pytest

from engine import protocol
from engine.adapters import AdapterIdentity
from engine.lora.registry import RETRY_FIRST_S, AdapterRegistry
from engine.redis_outage import Worker
from engine.service.redis_input import Inbox, RegistrySnapshot


class FakeEngine:
    """LLMEngine's adapter calls; an adapter whose path is "bad" fails to load."""

    def __init__(self):
        self.loaded: dict[str, AdapterIdentity] = {}
        self.attempts: list[str] = []

    def load_adapter(self, name: str, path: str, checksum: str = "") -> AdapterIdentity:
        self.attempts.append(name)
        if path == "bad":
            raise ValueError(f"{name}: layer 0 q_proj.lora_A has the wrong shape")
        self.loaded[name] = AdapterIdentity(name, checksum)
        return self.loaded[name]

    def unload_adapter(self, name: str) -> None:
        self.loaded.pop(name, None)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ref(name: str, checksum: str = "c1", path: str = "/adapters/x") -> protocol.AdapterRef:
    return protocol.AdapterRef(name=name, checksum=checksum, path=path)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def registry(clock):
    return AdapterRegistry(FakeEngine(), "m", clock=clock)


def test_reconcile_loads_missing_unloads_withdrawn_and_swaps_versions(registry, clock):
    registry.reconcile({"a": ref("a"), "b": ref("b")}, read_at=clock.now)
    assert registry.names() == ["a", "b"]
    assert dict(registry.versions) == {"a": "c1", "b": "c1"}

    clock.now += 2
    registry.reconcile({"a": ref("a", "c2"), "c": ref("c")}, read_at=clock.now)
    assert registry.names() == ["a", "c"]
    assert dict(registry.versions) == {"a": "c2", "c": "c1"}
    assert registry.identity_for(ref("a", "c2")) == AdapterIdentity("a", "c2")
    with pytest.raises(ValueError, match="not loaded"):
        registry.identity_for(ref("b"))

    attempts = len(registry.engine.attempts)
    registry.reconcile({"a": ref("a", "c2"), "c": ref("c")}, read_at=clock.now)
    assert len(registry.engine.attempts) == attempts, "what is loaded is not loaded again"


def test_a_bad_adapter_is_retried_with_backoff_never_every_beat(registry, clock, caplog):
    bad = ref("bad", path="bad")
    published = {"good": ref("good"), "bad": bad}
    with caplog.at_level(logging.ERROR):
        registry.reconcile(published, read_at=clock.now)
    assert registry.names() == ["good"]
    assert "adapter 'bad' from bad not loaded (attempt 1, next in 10s)" in caplog.text

    tried_at = []
    for _ in range(60):  # two minutes of beats every 2 s
        clock.now += 2
        before = registry.engine.attempts.count("bad")
        registry.reconcile(published, read_at=clock.now)
        if registry.engine.attempts.count("bad") > before:
            tried_at.append(clock.now)
    gaps = [b - a for a, b in zip([100.0, *tried_at], tried_at, strict=False)]
    assert gaps == [RETRY_FIRST_S, 2 * RETRY_FIRST_S, 4 * RETRY_FIRST_S]  # 4 tries, not 61

    # A new version of it is tried at once, and loads.
    clock.now += 2
    registry.reconcile({"good": ref("good"), "bad": ref("bad", "c2")}, read_at=clock.now)
    assert registry.names() == ["bad", "good"]


def test_a_snapshot_read_before_a_control_message_does_not_undo_it(registry, clock):
    read_at = clock.now  # the watcher reads the hash ...
    clock.now += 0.5
    registry.on_load_message(ref("new"))  # ... a LoadAdapter arrives and is applied first
    registry.reconcile({}, read_at=read_at)  # then the older snapshot, without "new"
    assert registry.names() == ["new"]

    clock.now += 2  # the next beat reads the hash after the message: it holds "new"
    registry.reconcile({"new": ref("new")}, read_at=clock.now)
    assert registry.names() == ["new"]
    clock.now += 2
    registry.on_unload_message("new")
    registry.reconcile({"new": ref("new")}, read_at=clock.now - 1)
    assert registry.names() == []


def test_unreadable_registry_records_are_skipped_and_logged_once(registry, redis_client, caplog):
    key = "regtest:adapters:m"
    redis_client.hset(key, "ok", protocol.encode(ref("ok")))
    redis_client.hset(key, "junk", b"\xff\x00 not msgpack")
    redis_client.hset(key, "liar", protocol.encode(ref("other")))
    with caplog.at_level(logging.ERROR):
        assert registry.readable(redis_client.hgetall(key)) == {"ok": ref("ok")}
        assert registry.readable(redis_client.hgetall(key)) == {"ok": ref("ok")}
    assert caplog.text.count("unreadable adapter record 'junk'") == 1
    assert caplog.text.count("unreadable adapter record 'liar'") == 1


def test_the_watcher_hands_snapshots_to_the_inbox(redis_client):
    key = "regtest:adapters:w"
    redis_client.hset(key, "a", protocol.encode(ref("a")))
    inbox = Inbox()
    watcher = Worker(
        "w",
        lambda: inbox.put(RegistrySnapshot(redis_client.hgetall(key), time.monotonic())),
        interval=0.05,
    )
    watcher.start()
    try:
        (event, *_) = inbox.take_all(timeout=2.0)
    finally:
        watcher.stop()
    assert isinstance(event, RegistrySnapshot) and event.records == {
        b"a": protocol.encode(ref("a"))
    }
