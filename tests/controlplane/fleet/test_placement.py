"""Placement as a pure function: memory estimates, fit, labels, spread, GPUs."""

from __future__ import annotations

from controlplane.fleet.placement import (
    GIB,
    RUNTIME_OVERHEAD_BYTES,
    Need,
    NodeRoom,
    Slot,
    no_fit_reason,
    replica_memory_bytes,
)
from controlplane.fleet.placement import place as place_slots


def place(need, count, rooms):
    """The node names only (CPU replicas have no GPU)."""
    return [slot.node if slot else None for slot in place_slots(need, count, rooms)]


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


def _gpu_node(*gpu_gib, name="gpu", memory_gib=64):
    return NodeRoom(
        name=name, free_bytes=memory_gib * GIB, gpu_free_bytes=[int(g * GIB) for g in gpu_gib]
    )


def test_gpu_replicas_need_one_gpu_that_holds_their_whole_estimate():
    gpu_node = _gpu_node(10, 20)
    cpu_node = NodeRoom(name="cpu", free_bytes=256 * GIB)
    need = Need(memory_bytes=12 * GIB, gpu=True)
    assert place_slots(need, 2, [cpu_node, gpu_node]) == [Slot("gpu", 1), None]
    assert gpu_node.gpu_free_bytes == [10 * GIB, 8 * GIB]
    # The host process's overhead comes from the node's memory too.
    assert gpu_node.free_bytes == 64 * GIB - RUNTIME_OVERHEAD_BYTES


def test_two_replicas_that_each_fit_one_gpu_go_to_different_gpus():
    node = _gpu_node(24, 24)
    need = Need(memory_bytes=6 * GIB, gpu=True)  # both would fit on GPU 0: they spread
    assert place_slots(need, 2, [node]) == [Slot("gpu", 0), Slot("gpu", 1)]
    assert node.gpu_free_bytes == [18 * GIB, 18 * GIB] and node.gpu_replicas == [1, 1]
    # A third shares a GPU: the fullest that holds it (both equal here: the lowest index).
    assert place_slots(need, 1, [node]) == [Slot("gpu", 0)]


def test_among_equally_used_gpus_the_fullest_that_holds_it_wins():
    node = _gpu_node(40, 80)
    node.occupy(Need(memory_bytes=30 * GIB, gpu=True), 0)  # GPU 0 runs one already
    node.occupy(Need(memory_bytes=20 * GIB, gpu=True), 1)  # and GPU 1 one
    assert node.gpu_free_bytes == [10 * GIB, 60 * GIB]
    # 8 GiB fits both: GPU 0, the fuller one, keeps GPU 1's big hole for a big model.
    assert place_slots(Need(memory_bytes=8 * GIB, gpu=True), 1, [node]) == [Slot("gpu", 0)]
    assert place_slots(Need(memory_bytes=50 * GIB, gpu=True), 1, [node]) == [Slot("gpu", 1)]


def test_gpu_memory_is_counted_per_gpu_not_per_node():
    node = _gpu_node(24, 24)
    too_big = Need(memory_bytes=30 * GIB, gpu=True)  # 48 GiB free in all, 24 on each
    assert place_slots(too_big, 1, [node]) == [None]
    assert node.gpu_free_bytes == [24 * GIB, 24 * GIB]  # nothing taken
    reason = no_fit_reason(too_big, [node, NodeRoom(name="cpu", free_bytes=512 * GIB)])
    assert reason.startswith("needs 30.0 GiB on one GPU, but the largest GPU")
    assert "has 24.0 GiB: an engine runs on a single GPU" in reason and "(2 live)" in reason


def test_no_fit_reasons_say_what_is_missing():
    full = _gpu_node(24)
    full.occupy(Need(memory_bytes=20 * GIB, gpu=True))
    fits_empty = Need(memory_bytes=10 * GIB, gpu=True)
    assert place_slots(fits_empty, 1, [full]) == [None]
    assert no_fit_reason(fits_empty, [full]) == (
        "no live node has a GPU with 10.0 GiB free and 0.5 GiB memory free (1 live)"
    )
    cpu_only = [NodeRoom(name="cpu", free_bytes=GIB)]
    assert no_fit_reason(fits_empty, cpu_only) == "no live node has a GPU (1 live)"
    labelled = Need(memory_bytes=2 * GIB, selector={"zone": "b"})
    assert no_fit_reason(labelled, cpu_only) == (
        "no live node with labels {'zone': 'b'} has 2.0 GiB memory free (1 live)"
    )
    # Only GPUs on nodes carrying the labels count towards "the largest GPU".
    other_zone = _gpu_node(80)
    need = Need(memory_bytes=30 * GIB, gpu=True, selector={"zone": "b"})
    labelled_small = _gpu_node(24, name="small")
    labelled_small.labels = {"zone": "b"}
    assert "largest GPU of a live node with labels {'zone': 'b'} has 24.0 GiB" in (
        no_fit_reason(need, [other_zone, labelled_small])
    )


def test_replicas_already_placed_count_on_the_gpu_they_were_given():
    node = _gpu_node(24, 24)
    assert node.occupy(Need(memory_bytes=20 * GIB, gpu=True), 1) == 1
    assert node.gpu_free_bytes == [24 * GIB, 4 * GIB]
    # One placed before GPUs were pinned (no index) that fits nowhere now counts on the
    # emptiest GPU rather than being forgotten.
    assert node.occupy(Need(memory_bytes=30 * GIB, gpu=True)) == 0
    assert node.gpu_free_bytes == [-6 * GIB, 4 * GIB]
