"""Placement: which live node gets each missing replica. Pure functions over plain values, so
the rules are tested without a database or Redis.

A replica needs ``replica_memory_bytes``: its weights (parameters x bytes per parameter of its
dtype, or of its quantization when it has one), its KV cache (an embeddings model's pooling
engine has none), and a fixed runtime overhead
(the interpreter, torch and their buffers). A CPU replica takes that from its node's memory.
A GPU replica runs on exactly one GPU (the engine has no tensor parallelism): that GPU gives it
the whole estimate (the overhead there is the CUDA context and the allocator's slack), and the
node's memory gives it the overhead once more (the host process). Memory is counted per GPU,
so a replica bigger than every single GPU is never placed, however many GPUs a node has.
Among the nodes that fit and carry the deployment's labels, each replica goes to the node with
the fewest replicas of its deployment (spread), then the most free memory, then by name; on
that node, to the GPU with the fewest replicas (engines sharing a GPU share its compute), then
the fullest that holds it (leaving big holes for big models), then the lowest index.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

GIB = 2**30
# The engine process itself, beyond weights and KV cache: interpreter, torch, activations.
RUNTIME_OVERHEAD_BYTES = GIB // 2
_BYTES_PER_PARAMETER = {
    "float32": 4.0,
    "float": 4.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "half": 2.0,
    "int8": 1.0,
    "int4": 0.5,
}


def bytes_per_parameter(dtype: str, quantization: str = "") -> float:
    """What one weight takes: the quantization's size when there is one, else the dtype's
    ("auto" or unknown counts as float32, the most it can be)."""
    return _BYTES_PER_PARAMETER.get(quantization or dtype.lower(), 4.0)


def replica_memory_bytes(
    *,
    num_parameters: int,
    dtype: str,
    quantization: str = "",
    kv_cache_bytes: int,
    overhead_bytes: int = RUNTIME_OVERHEAD_BYTES,
) -> int:
    """The memory one engine of this model needs: weights + KV cache + runtime overhead."""
    weights = int(num_parameters * bytes_per_parameter(dtype, quantization))
    return weights + kv_cache_bytes + overhead_bytes


@dataclass
class NodeRoom:
    """A live node as placement sees it: what is still free, and how many replicas of the
    deployment being placed it already runs. ``gpu_total_bytes`` defaults to what
    ``gpu_free_bytes`` was when constructed (callers build a room from the node's GPUs, then
    ``occupy`` it with the replicas already there)."""

    name: str
    free_bytes: int
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_free_bytes: list[int] = field(default_factory=list)
    num_replicas: int = 0
    gpu_total_bytes: list[int] | None = None
    gpu_replicas: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.gpu_total_bytes is None:
            self.gpu_total_bytes = list(self.gpu_free_bytes)
        self.gpu_replicas = self.gpu_replicas or [0] * len(self.gpu_free_bytes)

    def carries(self, selector: Mapping[str, str]) -> bool:
        return all(self.labels.get(key) == value for key, value in selector.items())

    def fits(self, need: Need) -> bool:
        if need.gpu:
            return self.free_bytes >= need.overhead_bytes and self._gpu_for(need) is not None
        return self.free_bytes >= need.memory_bytes

    def _gpu_for(self, need: Need) -> int | None:
        """The GPU a new replica gets (see the module docstring); None when none holds it."""
        holding = [i for i, free in enumerate(self.gpu_free_bytes) if free >= need.memory_bytes]
        if not holding:
            return None
        return min(holding, key=lambda i: (self.gpu_replicas[i], self.gpu_free_bytes[i], i))

    def occupy(self, need: Need, gpu: int | None = None) -> int | None:
        """Take ``need`` from what is free; the GPU index it took, None on a CPU. A replica
        already placed passes the ``gpu`` it was given; a new one (``gpu`` None) gets one
        chosen here. A GPU replica without a valid index and no GPU holding it (placed before
        GPUs were pinned, or estimates changed since) takes the emptiest GPU: what runs counts
        even when it would not fit now."""
        if not need.gpu or not self.gpu_free_bytes:
            self.free_bytes -= need.memory_bytes
            return None
        if gpu is None or not 0 <= gpu < len(self.gpu_free_bytes):
            gpu = self._gpu_for(need)
            if gpu is None:
                gpu = max(range(len(self.gpu_free_bytes)), key=lambda i: self.gpu_free_bytes[i])
        self.gpu_free_bytes[gpu] -= need.memory_bytes
        self.gpu_replicas[gpu] += 1
        self.free_bytes -= need.overhead_bytes
        return gpu


@dataclass(frozen=True)
class Need:
    """One replica's demand: its memory (see ``replica_memory_bytes``) and whether on a GPU."""

    memory_bytes: int
    gpu: bool = False
    overhead_bytes: int = RUNTIME_OVERHEAD_BYTES
    selector: Mapping[str, str] = field(default_factory=dict)


class Slot(NamedTuple):
    """Where a replica goes: a node, and on a GPU replica the index of its GPU in the node's
    ``gpus`` (nvidia-smi's order)."""

    node: str
    gpu: int | None = None


def place(need: Need, count: int, nodes: list[NodeRoom]) -> list[Slot | None]:
    """The slot for each of ``count`` new replicas, None for one no node fits. ``nodes`` (live
    ones only) are updated as replicas are placed, so a caller placing several deployments in
    turn passes the same list (with ``num_replicas`` reset per deployment)."""
    chosen: list[Slot | None] = []
    for _ in range(count):
        fitting = [n for n in nodes if n.carries(need.selector) and n.fits(need)]
        if not fitting:
            chosen.append(None)
            continue
        best = min(fitting, key=lambda n: (n.num_replicas, -n.free_bytes, n.name))
        gpu = best.occupy(need)
        best.num_replicas += 1
        chosen.append(Slot(best.name, gpu))
    return chosen


def no_fit_reason(need: Need, nodes: list[NodeRoom]) -> str:
    """Why no node in ``nodes`` (the live ones, as placement left them) fits ``need``: shown
    on the waiting replica, so it says what to change."""
    labels = f" with labels {dict(need.selector)}" if need.selector else ""
    live = f"({len(nodes)} live)"
    if not need.gpu:
        return f"no live node{labels} has {need.memory_bytes / GIB:.1f} GiB memory free {live}"
    eligible = [n for n in nodes if n.carries(need.selector)]
    largest = max((total for n in eligible for total in n.gpu_total_bytes), default=0)
    if not largest:
        return f"no live node{labels} has a GPU {live}"
    if largest < need.memory_bytes:
        return (
            f"needs {need.memory_bytes / GIB:.1f} GiB on one GPU, but the largest GPU of a live "
            f"node{labels} has {largest / GIB:.1f} GiB: an engine runs on a single GPU (lower "
            f"--kv-cache-gb, or quantize) {live}"
        )
    return (
        f"no live node{labels} has a GPU with {need.memory_bytes / GIB:.1f} GiB free and "
        f"{need.overhead_bytes / GIB:.1f} GiB memory free {live}"
    )
