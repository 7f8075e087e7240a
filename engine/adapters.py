"""Adapter identity: what the prefix cache needs to know about a LoRA adapter.

Two requests may share cached KV blocks only if they run under the same adapter, so the
identity (name and content checksum) goes into every block hash. LoRA weights come later.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AdapterIdentity:
    name: str
    checksum: str

    def hash_key(self) -> str:
        """The string mixed into block hashes; the checksum makes a re-upload a new identity."""
        return f"{self.name}\x00{self.checksum}"
