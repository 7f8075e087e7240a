"""An LRU cache of loaded adapters in host memory, keyed by adapter identity.

Reading an adapter from disk costs far more than copying it into a device slot, so adapters
evicted from slots stay here until ``capacity`` newer ones push them out. The key is the
identity (name and checksum): a re-uploaded adapter with the same name is a new entry.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from engine.adapters import AdapterIdentity
from engine.lora.loader import LoraAdapter


class AdapterHostCache:
    """Least recently used first out; ``get_or_load`` is the one way adapters enter."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"host cache capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[AdapterIdentity, LoraAdapter] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, identity: AdapterIdentity) -> bool:
        return identity in self._entries

    def identities(self) -> list[AdapterIdentity]:
        """Cached identities, least recently used first."""
        return list(self._entries)

    def get_or_load(
        self, identity: AdapterIdentity, load: Callable[[], LoraAdapter]
    ) -> LoraAdapter:
        adapter = self._entries.get(identity)
        if adapter is not None:
            self._entries.move_to_end(identity)
            return adapter
        adapter = load()
        self._entries[identity] = adapter
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return adapter

    def discard(self, identity: AdapterIdentity) -> None:
        self._entries.pop(identity, None)

    def remove(self, name: str) -> int:
        """Drop every version of adapter ``name``; return how many entries went."""
        doomed = [identity for identity in self._entries if identity.name == name]
        for identity in doomed:
            del self._entries[identity]
        return len(doomed)
