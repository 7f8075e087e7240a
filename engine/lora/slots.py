"""Device slots: ``max_loras`` adapters resident at once, stacked per layer and module.

For every decoder layer and every LoRA module (a single projection such as ``o_proj`` or a
packed one such as ``qkv_proj`` = q, k, v) the slots share two tensors::

    lora_a[module][layer]  [max_loras, num_packed * max_rank, in_features]
    lora_b[module][layer]  [max_loras, out_features, num_packed * max_rank]

A slot of rank r fills its first r rows of A per packed sub-module (sub-module i at rows
[i*r, (i+1)*r)) and the matching block of B; everything else stays zero, so an adapter that
does not target a module contributes exactly nothing there. ``scalings`` [max_loras] holds
each slot's alpha / r. Slots are reused in least-recently-used order, never while a running
request holds them (``hold`` / ``release`` count holders).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch

from engine.adapters import AdapterIdentity
from engine.lora.loader import LoraAdapter
from engine.lora.shapes import SUPPORTED_MODULES, BaseModelShape

# How an engine that fuses projections names them; pass as ``modules`` to LoraSlots.
PACKED_MODULES = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "o_proj": ("o_proj",),
    "gate_up_proj": ("gate_proj", "up_proj"),
    "down_proj": ("down_proj",),
}
UNPACKED_MODULES = {name: (name,) for name in SUPPORTED_MODULES}


class NoFreeSlotError(RuntimeError):
    """More distinct adapters are held than there are slots."""


class LoraSlots:
    """The stacked slot tensors plus two bookkeeping maps.

    *Holding* is the scheduler's promise that a running request needs an adapter: at most
    ``max_loras`` distinct adapters are held at once (``can_hold``), so every held adapter
    always finds a slot. *Residency* is where weights are: ``ensure`` loads an adapter into a
    free slot or, failing that, into the least recently used slot of an adapter nobody holds.
    Adapters stay resident after their last holder leaves, so a returning adapter costs no copy.
    """

    def __init__(
        self,
        base: BaseModelShape,
        *,
        max_loras: int,
        max_lora_rank: int,
        modules: dict[str, tuple[str, ...]] | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        fold_scaling: bool = False,
    ):
        if max_loras < 1 or max_lora_rank < 1:
            raise ValueError("max_loras and max_lora_rank must be positive")
        self.base = base
        self.max_loras = max_loras
        self.max_lora_rank = max_lora_rank
        self.modules = dict(modules or UNPACKED_MODULES)
        # kernels.lora expects alpha / r folded into B (its scalings are then all 1).
        self.fold_scaling = fold_scaling
        self.lora_a: dict[str, list[torch.Tensor]] = {}
        self.lora_b: dict[str, list[torch.Tensor]] = {}
        for module, parts in self.modules.items():
            in_sizes = {base.in_out(p)[0] for p in parts}
            if len(in_sizes) != 1:
                raise ValueError(f"packed module {module} mixes input sizes {in_sizes}")
            (in_features,) = in_sizes
            out_features = sum(base.in_out(p)[1] for p in parts)
            width = len(parts) * max_lora_rank
            self.lora_a[module] = [
                torch.zeros(max_loras, width, in_features, device=device, dtype=dtype)
                for _ in range(base.num_hidden_layers)
            ]
            self.lora_b[module] = [
                torch.zeros(max_loras, out_features, width, device=device, dtype=dtype)
                for _ in range(base.num_hidden_layers)
            ]
        self.scalings = torch.zeros(max_loras, device=device, dtype=torch.float32)
        # Per slot, as Python numbers for building segments without device syncs.
        self.ranks = [0] * max_loras
        self.scales = [0.0] * max_loras
        # identity -> slot, least recently used first.
        self._resident: OrderedDict[AdapterIdentity, int] = OrderedDict()
        # identity -> number of running requests holding it.
        self._holders: dict[AdapterIdentity, int] = {}

    # Lookup ------------------------------------------------------------------------------

    def slot_of(self, identity: AdapterIdentity) -> int | None:
        return self._resident.get(identity)

    def resident(self) -> list[AdapterIdentity]:
        """Adapters in slots, least recently used first."""
        return list(self._resident)

    def held(self) -> list[AdapterIdentity]:
        return list(self._holders)

    def num_holders(self, identity: AdapterIdentity) -> int:
        return self._holders.get(identity, 0)

    # Holding (scheduler) -----------------------------------------------------------------

    def can_hold(self, identity: AdapterIdentity) -> bool:
        """True if a request of ``identity`` may run now without exceeding max_loras."""
        return identity in self._holders or len(self._holders) < self.max_loras

    def hold(self, identity: AdapterIdentity) -> None:
        if not self.can_hold(identity):
            raise NoFreeSlotError(
                f"all {self.max_loras} LoRA slots are held by running requests; "
                f"adapter {identity.name} must wait"
            )
        self._holders[identity] = self._holders.get(identity, 0) + 1

    def release(self, identity: AdapterIdentity) -> None:
        count = self._holders.get(identity, 0)
        if count == 0:
            raise ValueError(f"adapter {identity.name} is not held")
        if count == 1:
            del self._holders[identity]
        else:
            self._holders[identity] = count - 1

    # Residency (model runner) ------------------------------------------------------------

    def ensure(self, identity: AdapterIdentity, load: Callable[[], LoraAdapter]) -> int:
        """Resident slot of ``identity``; if absent, ``load()`` fills a free or LRU slot."""
        slot = self._resident.get(identity)
        if slot is not None:
            self._resident.move_to_end(identity)
            return slot
        slot = self._free_slot()
        if slot is None:
            raise NoFreeSlotError(
                f"all {self.max_loras} LoRA slots hold adapters of running requests; "
                f"adapter {identity.name} cannot be loaded now"
            )
        adapter = load()
        self._evict_slot(slot)
        self._write(slot, adapter)
        self._resident[identity] = slot
        return slot

    def evict(self, name: str) -> list[AdapterIdentity]:
        """Empty the slots of every version of ``name`` that no request holds."""
        gone = [i for i in self._resident if i.name == name and i not in self._holders]
        for identity in gone:
            self._clear(self._resident.pop(identity))
        return gone

    # Internals ---------------------------------------------------------------------------

    def _free_slot(self) -> int | None:
        used = set(self._resident.values())
        for slot in range(self.max_loras):
            if slot not in used:
                return slot
        for identity, slot in self._resident.items():  # least recently used first
            if identity not in self._holders:
                return slot
        return None

    def _evict_slot(self, slot: int) -> None:
        for identity, held in list(self._resident.items()):
            if held == slot:
                del self._resident[identity]
                self._clear(slot)

    def _clear(self, slot: int) -> None:
        for module in self.modules:
            for layer in range(self.base.num_hidden_layers):
                self.lora_a[module][layer][slot].zero_()
                self.lora_b[module][layer][slot].zero_()
        self.scalings[slot] = 0.0
        self.ranks[slot] = 0
        self.scales[slot] = 0.0

    def _write(self, slot: int, adapter: LoraAdapter) -> None:
        rank = adapter.rank
        if rank > self.max_lora_rank:
            raise ValueError(f"adapter rank {rank} exceeds max_lora_rank {self.max_lora_rank}")
        # The slot is zero here (fresh, or cleared on eviction): only the adapter's blocks
        # are written.
        for module, parts in self.modules.items():
            for layer in range(self.base.num_hidden_layers):
                a_slot = self.lora_a[module][layer][slot]
                b_slot = self.lora_b[module][layer][slot]
                out_offset = 0
                for i, part in enumerate(parts):
                    out_features = self.base.in_out(part)[1]
                    pair = adapter.weights.get((layer, part))
                    if pair is not None:
                        a, b = pair
                        a_slot[i * rank : (i + 1) * rank].copy_(a)
                        rows = slice(out_offset, out_offset + out_features)
                        if self.fold_scaling:
                            b = b * adapter.scaling
                        b_slot[rows, i * rank : (i + 1) * rank].copy_(b)
                    out_offset += out_features
        scale = 1.0 if self.fold_scaling else adapter.scaling
        self.ranks[slot] = rank
        self.scales[slot] = scale
        self.scalings[slot] = scale
