"""How a node agent starts one replica's engine: its ``run_engine`` options and, for a GPU
replica, its environment. Pure functions over plain values, so the rules are tested without a
GPU, a database or a process.

A GPU replica is pinned to the GPU placement gave it (``Replica.gpu_index``, an index into the
node's ``gpus`` as nvidia-smi listed them): ``CUDA_VISIBLE_DEVICES`` names that GPU alone, so
the engine's ``cuda`` device is it. CUDA numbers GPUs fastest first by default, nvidia-smi by
PCI bus; ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes both count the same way, or an engine on a
node with mixed GPUs would land on another GPU than the one whose memory placement counted.

Several replicas may share a GPU (placement fits them by memory), so each engine must stay
inside what placement reserved for it: the engine sizes its KV cache from
``gpu_memory_utilization`` (the share of the GPU it may allocate), and the agent sets that to
the replica's weights and KV cache over the GPU's memory, instead of the engine's default 0.9
(which would let the first engine take the room of the others). CPU replicas are started as
before: no GPU environment, their KV cache from ``--cpu-kv-cache-space``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from controlplane.fleet.placement import RUNTIME_OVERHEAD_BYTES


def engine_environment(gpu_index: int | None, base: Mapping[str, str]) -> dict[str, str] | None:
    """The whole environment of a GPU replica's engine: ``base`` (the agent's own) pinned to
    GPU ``gpu_index``. None for a replica with no GPU: it inherits the agent's, unchanged."""
    if gpu_index is None:
        return None
    env = dict(base)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["CUDA_VISIBLE_DEVICES"] = str(gpu_index)
    return env


def gpu_memory_share(replica_bytes: int, gpu_bytes: int) -> float | None:
    """``gpu_memory_utilization`` for an engine placed with ``replica_bytes`` on a GPU of
    ``gpu_bytes``: its weights and KV cache over the GPU's memory, rounded down (never more
    than placement reserved; the runtime overhead is left for the CUDA context). None when the
    GPU's size is unknown (the engine's default then applies)."""
    if gpu_bytes <= 0 or replica_bytes <= 0:
        return None
    share = (replica_bytes - RUNTIME_OVERHEAD_BYTES) / gpu_bytes
    return min(1.0, max(0.01, math.floor(share * 1000) / 1000))


def engine_options(
    deployment,
    *,
    engine_id: str,
    redis_url: str,
    drain_timeout_s: float,
    gpu_index: int | None = None,
    replica_bytes: int = 0,
    node_gpus: list[Mapping] | None = None,
) -> dict:
    """``run_engine``'s options for a replica of ``deployment`` (a fleet Deployment, or
    anything with its engine settings). On a GPU replica pinned to ``gpu_index`` of
    ``node_gpus``, the memory share from ``replica_bytes`` (the estimate it was placed by)."""
    d = deployment
    options = {
        "engine_id": engine_id,
        "redis_url": redis_url,
        "device": d.device,
        "dtype": d.dtype or None,
        "quantization": d.quantization or None,
        "max_model_len": d.max_model_len,
        "max_num_seqs": d.max_num_seqs,
        "cpu_threads": d.cpu_threads,
        "cpu_kv_cache_space": d.kv_cache_gb if d.device != "cuda" else None,
        "drain_timeout": drain_timeout_s,
    }
    gpus = node_gpus or []
    if d.device == "cuda" and gpu_index is not None and 0 <= gpu_index < len(gpus):
        gpu_bytes = int(gpus[gpu_index].get("memory_bytes", 0))
        options["gpu_memory_utilization"] = gpu_memory_share(replica_bytes, gpu_bytes)
    return options
