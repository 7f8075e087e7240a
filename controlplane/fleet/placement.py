"""Placement: which live node gets each missing replica. Pure functions over plain values, so
the rules are tested without a database or Redis.

A replica needs ``replica_memory_bytes``: its weights (parameters x bytes per parameter of its
dtype, or of its quantization when it has one), its KV cache, and a fixed runtime overhead
(the interpreter, torch and their buffers). A CPU replica takes that from its node's memory;
a GPU replica from one GPU's memory (weights and KV cache) and the overhead from the node's.
Among the nodes that fit and carry the deployment's labels, each replica goes to the node with
the fewest replicas of its deployment (spread), then the most free memory, then by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

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
    deployment being placed it already runs."""

    name: str
    free_bytes: int
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_free_bytes: list[int] = field(default_factory=list)
    num_replicas: int = 0

    def carries(self, selector: Mapping[str, str]) -> bool:
        return all(self.labels.get(key) == value for key, value in selector.items())

    def fits(self, need: Need) -> bool:
        if need.gpu:
            gpu_need = need.memory_bytes - need.overhead_bytes
            has_gpu = any(free >= gpu_need for free in self.gpu_free_bytes)
            return has_gpu and self.free_bytes >= need.overhead_bytes
        return self.free_bytes >= need.memory_bytes

    def occupy(self, need: Need) -> None:
        """Take ``need`` from what is free; a GPU replica from the GPU that fits it best (the
        fullest that still holds it; the emptiest when none does: already placed replicas
        count even when estimates changed)."""
        if need.gpu and self.gpu_free_bytes:
            gpu_need = need.memory_bytes - need.overhead_bytes
            holding = [i for i, free in enumerate(self.gpu_free_bytes) if free >= gpu_need]
            gpus = range(len(self.gpu_free_bytes))
            index = (
                min(holding, key=lambda i: self.gpu_free_bytes[i])
                if holding
                else max(gpus, key=lambda i: self.gpu_free_bytes[i])
            )
            self.gpu_free_bytes[index] -= gpu_need
            self.free_bytes -= need.overhead_bytes
        else:
            self.free_bytes -= need.memory_bytes


@dataclass(frozen=True)
class Need:
    """One replica's demand: its memory (see ``replica_memory_bytes``) and whether on a GPU."""

    memory_bytes: int
    gpu: bool = False
    overhead_bytes: int = RUNTIME_OVERHEAD_BYTES
    selector: Mapping[str, str] = field(default_factory=dict)


def place(need: Need, count: int, nodes: list[NodeRoom]) -> list[str | None]:
    """The node name for each of ``count`` new replicas, None for one no node fits. ``nodes``
    (live ones only) are updated as replicas are placed, so a caller placing several
    deployments in turn passes the same list (with ``num_replicas`` reset per deployment)."""
    chosen: list[str | None] = []
    for _ in range(count):
        fitting = [n for n in nodes if n.carries(need.selector) and n.fits(need)]
        if not fitting:
            chosen.append(None)
            continue
        best = min(fitting, key=lambda n: (n.num_replicas, -n.free_bytes, n.name))
        best.occupy(need)
        best.num_replicas += 1
        chosen.append(best.name)
    return chosen
