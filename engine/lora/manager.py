"""LoraManager: what the engine calls to serve adapters.

It joins the host cache (disk -> host memory, LRU) and the device slots (host -> slots, LRU
among adapters no running request holds). The scheduler calls ``can_hold`` before admitting a
request with an adapter, ``hold`` when it starts running and ``release`` when it finishes or
is preempted; the model runner calls ``prepare_batch`` once per step (which loads adapters on
first use) and passes the result to ``apply`` in every LoRA-enabled linear layer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.adapters import AdapterIdentity
from engine.lora.host_cache import AdapterHostCache
from engine.lora.loader import LoraAdapter, load_adapter
from engine.lora.ops import LoraSegments, add_lora_
from engine.lora.shapes import BaseModelShape
from engine.lora.slots import LoraSlots
from engine.lora.validation import adapter_checksum

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoraBatch:
    """One step's adapter layout: per-token slot (-1: none) and its grouping into segments."""

    token_slots: torch.Tensor  # [num_tokens] int64
    segments: LoraSegments

    @property
    def has_lora(self) -> bool:
        return bool(self.segments.segments)


class LoraManager:
    def __init__(
        self,
        base: BaseModelShape,
        *,
        max_loras: int,
        max_lora_rank: int,
        max_cpu_loras: int | None = None,
        modules: dict[str, tuple[str, ...]] | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        fold_scaling: bool = False,
    ):
        self.base = base
        self.max_loras = max_loras
        self.max_lora_rank = max_lora_rank
        self.dtype = dtype
        self.modules = modules
        self.device = device
        self.fold_scaling = fold_scaling
        self._slots: LoraSlots | None = None
        self.host_cache = AdapterHostCache(max(max_cpu_loras or 0, max_loras))
        # Where each known adapter's files are: from requests' AdapterRef or LoadAdapter.
        self._paths: dict[AdapterIdentity, Path] = {}
        # Removed while requests still held them: usable by those until their release.
        self._removed: set[AdapterIdentity] = set()

    @property
    def slots(self) -> LoraSlots:
        """The device slots, allocated on first use: an engine that never serves an adapter
        spends no device memory on them."""
        if self._slots is None:
            self._slots = LoraSlots(
                self.base,
                max_loras=self.max_loras,
                max_lora_rank=self.max_lora_rank,
                modules=self.modules,
                device=self.device,
                dtype=self.dtype,
                fold_scaling=self.fold_scaling,
            )
            logger.info(
                "LoRA slots allocated: max_loras=%d max_lora_rank=%d",
                self.max_loras,
                self.max_lora_rank,
            )
        return self._slots

    # Registry (control messages) ---------------------------------------------------------

    def add_adapter(self, name: str, path: str | Path, checksum: str = "") -> AdapterIdentity:
        """Validate and load an adapter into host memory ahead of use; return its identity.

        Raises AdapterError (a ValueError) when the files do not fit the base model or do
        not match ``checksum``.
        """
        _ = self.slots  # allocate now, so a lack of memory fails this load, not a later step
        identity = AdapterIdentity(name, checksum or adapter_checksum(path))
        self._paths[identity] = Path(path)
        self._host_adapter(identity)
        return identity

    def remove_adapter(self, name: str) -> None:
        """Forget every version of ``name``: no new request may use it. Requests already
        running keep it (weights stay in their slot and in host memory) until they release it.
        """
        versions = {i for i in (*self._paths, *self.host_cache.identities()) if i.name == name}
        for identity in versions:
            if self.slots.num_holders(identity):
                self._removed.add(identity)
            else:
                self._forget(identity)
        if self._slots is not None:
            self._slots.evict(name)

    def _forget(self, identity: AdapterIdentity) -> None:
        self._paths.pop(identity, None)
        self._removed.discard(identity)
        self.host_cache.discard(identity)

    # Scheduling --------------------------------------------------------------------------

    def knows(self, identity: AdapterIdentity) -> bool:
        """True if the engine can load ``identity`` (added, or cached in host memory)."""
        if identity in self._removed:
            return False
        return identity in self._paths or identity in self.host_cache

    def can_hold(self, identity: AdapterIdentity) -> bool:
        """May a request of ``identity`` start running now (max_loras distinct adapters)?"""
        return self.slots.can_hold(identity)

    def hold(self, identity: AdapterIdentity) -> None:
        """A request of ``identity`` starts running; raises NoFreeSlotError if none can."""
        if not self.knows(identity):
            raise KeyError(f"adapter {identity.name} is unknown to this engine (no path)")
        self.slots.hold(identity)

    def release(self, identity: AdapterIdentity) -> None:
        """A request of ``identity`` finished or was preempted."""
        self.slots.release(identity)
        if identity in self._removed and not self.slots.num_holders(identity):
            self._forget(identity)  # removed while running: free it now
            self.slots.evict(identity.name)

    def running_adapters(self) -> list[str]:
        """Names of adapters that running requests hold (vllm:lora_requests_info)."""
        return sorted({i.name for i in self.slots.held()})

    # Forward -----------------------------------------------------------------------------

    def prepare_batch(
        self, adapters: Sequence[AdapterIdentity | None], num_tokens: Sequence[int]
    ) -> LoraBatch:
        """Token slots for a flattened batch: request i contributes ``num_tokens[i]`` tokens.

        Loads adapters not yet in a slot (from host memory, or from disk on first use). The
        scheduler must hold every adapter of the batch, which guarantees each finds a slot.
        """
        slot_of: dict[AdapterIdentity, int] = {}
        for identity in adapters:
            if identity is not None and identity not in slot_of:
                if not self.slots.num_holders(identity):
                    # Unheld adapters could evict each other within this very batch.
                    raise RuntimeError(f"adapter {identity.name} is in the batch but not held")
                slot_of[identity] = self.slots.ensure(
                    identity, lambda identity=identity: self._host_adapter(identity)
                )
        per_token: list[int] = []
        for identity, count in zip(adapters, num_tokens, strict=True):
            per_token.extend([-1 if identity is None else slot_of[identity]] * count)
        device = self.slots.scalings.device
        segments = LoraSegments.build(per_token, self.slots.ranks, self.slots.scales, device=device)
        token_slots = torch.tensor(per_token, dtype=torch.int64, device=device)
        return LoraBatch(token_slots=token_slots, segments=segments)

    def apply(
        self, y: torch.Tensor, x: torch.Tensor, layer: int, module: str, batch: LoraBatch
    ) -> torch.Tensor:
        """Add the LoRA deltas of ``module`` in ``layer`` to ``y`` = base_linear(x), in place.

        ``module`` is a key of the slots' module map (``o_proj``, or ``qkv_proj`` when the
        engine packs q, k and v); y [num_tokens, out], x [num_tokens, in].
        """
        if not batch.has_lora:
            return y
        return add_lora_(
            y,
            x,
            self.slots.lora_a[module][layer],
            self.slots.lora_b[module][layer],
            batch.segments,
            num_packed=len(self.slots.modules[module]),
        )

    # Internals ---------------------------------------------------------------------------

    def _host_adapter(self, identity: AdapterIdentity) -> LoraAdapter:
        path = self._paths.get(identity)
        if path is None and identity not in self.host_cache:
            raise KeyError(f"adapter {identity.name} is unknown to this engine (no path)")

        def load() -> LoraAdapter:
            logger.info("loading adapter %s from %s", identity.name, path)
            return load_adapter(
                path,
                self.base,
                name=identity.name,
                max_lora_rank=self.max_lora_rank,
                dtype=self.dtype,
                expected_checksum=identity.checksum,
            )

        return self.host_cache.get_or_load(identity, load)
