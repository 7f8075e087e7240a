"""Placement as a pure function: memory estimates, fit, labels, spread."""

from __future__ import annotations

from controlplane.fleet.placement import (
    GIB,
    RUNTIME_OVERHEAD_BYTES,
    Need,
    NodeRoom,
    place,
    replica_memory_bytes,
)


def test_memory_is_weights_in_their_dtype_or_quantization_plus_kv_cache_and_overhead():
    def memory(**kw):
        return replica_memory_bytes(num_parameters=1_000_000, kv_cache_bytes=GIB, **kw)

    base = GIB + RUNTIME_OVERHEAD_BYTES
    assert memory(dtype="float32") == base + 4_000_000
    assert memory(dtype="bfloat16") == base + 2_000_000
    assert memory(dtype="bfloat16", quantization="int8") == base + 1_000_000
    assert memory(dtype="float32", quantization="int4") == base + 500_000
    assert memory(dtype="auto") == memory(dtype="float32")  # the most it can be


def _rooms(*free_gib, labels=None):
    return [
        NodeRoom(name=f"n{i}", free_bytes=int(g * GIB), labels=(labels or {}).get(f"n{i}", {}))
        for i, g in enumerate(free_gib)
    ]


def test_replicas_spread_over_nodes_before_doubling_up():
    rooms = _rooms(10, 10, 10)
    assert sorted(place(Need(memory_bytes=GIB), 3, rooms)) == ["n0", "n1", "n2"]
    assert all(room.num_replicas == 1 for room in rooms)


def test_spread_counts_replicas_already_running():
    rooms = _rooms(10, 10)
    rooms[0].num_replicas = 2
    assert place(Need(memory_bytes=GIB), 2, rooms) == ["n1", "n1"]


def test_ties_go_to_the_node_with_more_free_memory():
    assert place(Need(memory_bytes=GIB), 1, _rooms(4, 8)) == ["n1"]


def test_a_replica_no_node_fits_is_left_unplaced_and_memory_is_used_up():
    rooms = _rooms(3, 1)
    assert place(Need(memory_bytes=2 * GIB), 3, rooms) == ["n0", None, None]
    assert rooms[0].free_bytes == GIB


def test_labels_restrict_the_nodes():
    rooms = _rooms(10, 10, labels={"n1": {"zone": "b", "gpu": "no"}})
    need = Need(memory_bytes=GIB, selector={"zone": "b"})
    assert place(need, 2, rooms) == ["n1", "n1"]
    assert place(Need(memory_bytes=GIB, selector={"zone": "c"}), 1, rooms) == [None]


def test_gpu_replicas_need_a_gpu_that_holds_weights_and_kv_cache():
    gpu_node = NodeRoom(name="gpu", free_bytes=64 * GIB, gpu_free_bytes=[10 * GIB, 20 * GIB])
    cpu_node = NodeRoom(name="cpu", free_bytes=256 * GIB)
    need = Need(memory_bytes=12 * GIB + RUNTIME_OVERHEAD_BYTES, gpu=True)
    assert place(need, 2, [cpu_node, gpu_node]) == ["gpu", None]
    assert gpu_node.gpu_free_bytes == [10 * GIB, 8 * GIB]
    # A smaller one goes to the fullest GPU that still holds it (best fit).
    small = Need(memory_bytes=5 * GIB + RUNTIME_OVERHEAD_BYTES, gpu=True)
    assert place(small, 1, [gpu_node]) == ["gpu"]
    assert gpu_node.gpu_free_bytes == [10 * GIB, 3 * GIB]
