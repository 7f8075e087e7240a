"""Device slots, the host cache and the manager: holding, LRU reuse, reloads, removal."""

from __future__ import annotations

import pytest
import torch

from engine.adapters import AdapterIdentity
from engine.lora.host_cache import AdapterHostCache
from engine.lora.loader import load_adapter
from engine.lora.manager import LoraManager
from engine.lora.slots import PACKED_MODULES, NoFreeSlotError
from engine.lora.validation import AdapterError
from engine.tooling.random_lora import make_random_adapter


@pytest.fixture(scope="module")
def adapter_dirs(base_path, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return [
        make_random_adapter(base_path, root / f"ad{i}", rank=4 + 2 * (i % 3), seed=10 + i)
        for i in range(4)
    ] + [make_random_adapter(base_path, root / "q-only", rank=4, targets=("q_proj",), seed=99)]


def _reference(adapter, x, layer, module):
    a, b = adapter.weights[(layer, module)]
    return adapter.scaling * (x @ a.t()) @ b.t()


def _run(manager, identity, num_tokens=2):
    """One single-request step: residency is settled by prepare_batch."""
    batch = manager.prepare_batch([identity], [num_tokens])
    return int(batch.token_slots[0])


def test_at_most_max_loras_distinct_adapters_are_held(base_shape, adapter_dirs):
    manager = LoraManager(base_shape, max_loras=2, max_lora_rank=8)
    ids = [manager.add_adapter(f"ad{i}", adapter_dirs[i]) for i in range(3)]
    manager.hold(ids[0])
    manager.hold(ids[1])
    manager.hold(ids[1])  # a second request of an adapter already held needs no new slot
    assert manager.can_hold(ids[1]) and not manager.can_hold(ids[2])
    with pytest.raises(NoFreeSlotError, match="all 2 LoRA slots are held"):
        manager.hold(ids[2])
    assert manager.running_adapters() == ["ad0", "ad1"]
    manager.release(ids[1])
    assert not manager.can_hold(ids[2]), "ad1 still has one running request"
    manager.release(ids[1])
    assert manager.can_hold(ids[2])
    with pytest.raises(ValueError, match="not held"):
        manager.release(ids[1])


def test_least_recently_used_unheld_slot_is_reused(base_shape, adapter_dirs):
    manager = LoraManager(base_shape, max_loras=2, max_lora_rank=8)
    ids = [manager.add_adapter(f"ad{i}", adapter_dirs[i]) for i in range(3)]
    for identity in (ids[0], ids[1], ids[0]):  # ad0 is the most recently used
        manager.hold(identity)
        _run(manager, identity)
        manager.release(identity)
    manager.hold(ids[2])
    _run(manager, ids[2])
    assert manager.slots.resident() == [ids[0], ids[2]]  # ad1 went: least recently used


def test_a_held_adapter_is_never_evicted(base_shape, adapter_dirs):
    manager = LoraManager(base_shape, max_loras=2, max_lora_rank=8)
    ids = [manager.add_adapter(f"ad{i}", adapter_dirs[i]) for i in range(3)]
    manager.hold(ids[0])
    _run(manager, ids[0])  # ad0: least recently used, but held
    manager.hold(ids[1])
    _run(manager, ids[1])
    manager.release(ids[1])
    manager.hold(ids[2])
    _run(manager, ids[2])
    assert manager.slots.resident() == [ids[0], ids[2]]


def test_a_batch_of_unheld_adapters_is_refused(base_shape, adapter_dirs):
    manager = LoraManager(base_shape, max_loras=2, max_lora_rank=8)
    identity = manager.add_adapter("ad0", adapter_dirs[0])
    with pytest.raises(RuntimeError, match="not held"):
        manager.prepare_batch([identity], [1])


def test_reused_slot_holds_no_stale_weights(base_shape, adapter_dirs):
    manager = LoraManager(base_shape, max_loras=1, max_lora_rank=8)
    full = manager.add_adapter("full", adapter_dirs[0])
    q_only = manager.add_adapter("q-only", adapter_dirs[4])
    manager.hold(full)
    _run(manager, full)
    manager.release(full)
    manager.hold(q_only)
    x = torch.randn(3, base_shape.hidden_size)
    batch = manager.prepare_batch([q_only], [3])
    y = torch.zeros(3, base_shape.intermediate_size)
    manager.apply(y, x, 0, "gate_proj", batch)
    assert torch.count_nonzero(y) == 0, "q-only adapter must not keep the old gate_proj weights"
    y = torch.zeros(3, base_shape.hidden_size)
    manager.apply(y, x, 0, "q_proj", batch)
    q_adapter = load_adapter(adapter_dirs[4], base_shape)
    torch.testing.assert_close(y, _reference(q_adapter, x, 0, "q_proj"))
    assert manager.slots.ranks[int(batch.token_slots[0])] == 4


@pytest.mark.parametrize("modules", [None, PACKED_MODULES], ids=["unpacked", "packed"])
def test_twice_as_many_adapters_as_slots_interleaved(base_shape, adapter_dirs, modules):
    """Requests for 2 x max_loras adapters, interleaved, all finish with their own deltas."""
    manager = LoraManager(base_shape, max_loras=2, max_lora_rank=8, modules=modules)
    ids = [manager.add_adapter(f"ad{i}", adapter_dirs[i]) for i in range(4)]
    loaded = [load_adapter(adapter_dirs[i], base_shape) for i in range(4)]
    waiting = list(enumerate([0, 1, 2, 3, 0, 2, 1, 3, 3, 0]))  # (request, adapter)
    running: list[tuple[int, int, int]] = []  # (request, adapter, steps left)
    finished = []
    g = torch.Generator().manual_seed(0)
    module = "qkv_proj" if modules else "v_proj"
    parts = PACKED_MODULES["qkv_proj"] if modules else ("v_proj",)
    out_features = sum(base_shape.in_out(p)[1] for p in parts)
    while waiting or running:
        for request, adapter in list(waiting):  # admit while the adapter can be held
            if manager.can_hold(ids[adapter]):
                manager.hold(ids[adapter])
                running.append((request, adapter, 1 + request % 3))
                waiting.remove((request, adapter))
        x = torch.randn(2 * len(running), base_shape.hidden_size, generator=g)
        batch = manager.prepare_batch([ids[a] for _, a, _ in running], [2] * len(running))
        y = torch.zeros(x.shape[0], out_features)
        manager.apply(y, x, 1, module, batch)
        for k, (request, adapter, left) in enumerate(list(running)):
            rows = slice(2 * k, 2 * k + 2)
            expected = torch.cat([_reference(loaded[adapter], x[rows], 1, p) for p in parts], 1)
            torch.testing.assert_close(y[rows], expected, rtol=1e-5, atol=1e-5)
            if left == 1:
                running.remove((request, adapter, left))
                manager.release(ids[adapter])
                finished.append(request)
            else:
                running[running.index((request, adapter, left))] = (request, adapter, left - 1)
    assert sorted(finished) == list(range(10))


def test_remove_while_running_frees_the_slot_on_release(base_shape, adapter_dirs):
    manager = LoraManager(base_shape, max_loras=1, max_lora_rank=8)
    ident = manager.add_adapter("ad0", adapter_dirs[0])
    manager.hold(ident)
    _run(manager, ident)
    manager.remove_adapter("ad0")
    assert not manager.knows(ident), "no new request may start on a removed adapter"
    assert manager.slots.resident() == [ident], "a running request keeps its adapter"
    _run(manager, ident)  # ... and keeps running
    manager.release(ident)
    assert manager.slots.resident() == []
    assert torch.count_nonzero(manager.slots.lora_a["q_proj"][0]) == 0
    with pytest.raises(KeyError, match="unknown to this engine"):
        manager.hold(ident)


def test_checksum_guard_and_rank_limit(base_shape, adapter_dirs):
    manager = LoraManager(base_shape, max_loras=2, max_lora_rank=8)
    checksum = load_adapter(adapter_dirs[1], base_shape).checksum
    assert manager.add_adapter("ad1", adapter_dirs[1], checksum) == AdapterIdentity("ad1", checksum)
    with pytest.raises(AdapterError, match="changed since they were registered"):
        manager.add_adapter("ad2", adapter_dirs[2], "0" * 64)
    small = LoraManager(base_shape, max_loras=2, max_lora_rank=4)
    with pytest.raises(AdapterError, match="exceeds the engine's max_lora_rank 4"):
        small.add_adapter("ad1", adapter_dirs[1])


def test_adapters_evicted_from_host_memory_reload_from_disk(base_shape, adapter_dirs):
    manager = LoraManager(base_shape, max_loras=1, max_lora_rank=8, max_cpu_loras=1)
    first = manager.add_adapter("ad0", adapter_dirs[0])
    manager.add_adapter("ad1", adapter_dirs[1])  # pushes ad0 out of host memory
    assert first not in manager.host_cache and manager.knows(first)
    manager.hold(first)
    x = torch.randn(2, base_shape.hidden_size)
    batch = manager.prepare_batch([first], [2])
    y = torch.zeros(2, base_shape.hidden_size)
    manager.apply(y, x, 1, "q_proj", batch)
    torch.testing.assert_close(
        y, _reference(load_adapter(adapter_dirs[0], base_shape), x, 1, "q_proj")
    )


def test_folded_scaling_gives_the_same_deltas(base_shape, adapter_dirs):
    """kernels.lora wants alpha / r inside B; the result must not change."""
    x = torch.randn(6, base_shape.hidden_size)
    results = []
    for fold in (False, True):
        manager = LoraManager(base_shape, max_loras=2, max_lora_rank=8, fold_scaling=fold)
        ids = [manager.add_adapter(f"ad{i}", adapter_dirs[i]) for i in range(2)]
        for identity in ids:
            manager.hold(identity)
        batch = manager.prepare_batch([ids[0], None, ids[1]], [2, 2, 2])
        y = torch.zeros(6, base_shape.hidden_size)
        results.append(manager.apply(y, x, 0, "q_proj", batch))
        assert manager.slots.scalings.tolist() == ([1.0, 1.0] if fold else [2.0, 2.0])
    torch.testing.assert_close(results[0], results[1])
    assert torch.count_nonzero(results[0][2:4]) == 0


def test_host_cache_is_lru_and_loads_once():
    cache = AdapterHostCache(capacity=2)
    loads = []

    def loader(name):
        def load():
            loads.append(name)
            return name

        return load

    a, b, c = (AdapterIdentity(n, "x") for n in "abc")
    cache.get_or_load(a, loader("a"))
    cache.get_or_load(b, loader("b"))
    cache.get_or_load(a, loader("a"))  # hit: a becomes most recent
    cache.get_or_load(c, loader("c"))  # evicts b
    assert loads == ["a", "b", "c"]
    assert cache.identities() == [a, c]
    assert cache.remove("a") == 1
    assert len(cache) == 1
    with pytest.raises(ValueError, match="at least 1"):
        AdapterHostCache(capacity=0)
