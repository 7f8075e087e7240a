"""Reads of shared prefixes: the active ones, detached from the ORM for per-process caches, and
the public salt each one is cached under on a model."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from controlplane.shared_prefixes.models import SharedPrefix


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class SharedPrefixRecord:
    """An active shared prefix as the API caches it (JSON fields kept as canonical text, so
    the record is immutable and hashable)."""

    name: str
    version: int
    kind: str  # SharedPrefix.Kind: "chat" or "text"
    text: str
    messages_json: str
    tools_json: str
    models: frozenset[str]  # empty: every served model

    @property
    def label(self) -> str:
        return f"{self.name} v{self.version}"

    @property
    def messages(self) -> list[dict[str, Any]]:
        return json.loads(self.messages_json)

    @property
    def tools(self) -> list[dict[str, Any]]:
        return json.loads(self.tools_json)

    def applies_to(self, model: str) -> bool:
        return not self.models or model in self.models

    def content_digest(self) -> str:
        """Names the content: a version edited in place gets a new digest (and salt)."""
        material = _canonical([self.kind, self.text, self.messages_json, self.tools_json])
        return hashlib.sha256(material.encode()).hexdigest()

    def public_salt(self, model: str) -> str:
        """The salt its blocks are cached under on ``model``: from the declaration alone, the
        same in every API process, never from anything a client sends. Its "shared:" form can
        never equal a tenant's salt (64 hex digits), and the engine hashes public blocks in
        another shape anyway (engine/core/block_hash.py)."""
        material = _canonical(["shared-prefix", self.name, self.version, model])
        digest = hashlib.sha256(f"{material}\0{self.content_digest()}".encode()).hexdigest()
        return f"shared:{digest}"


def shared_prefix_record(prefix: SharedPrefix) -> SharedPrefixRecord:
    return SharedPrefixRecord(
        name=prefix.name,
        version=prefix.version,
        kind=prefix.kind,
        text=prefix.text,
        messages_json=_canonical(prefix.messages or []),
        tools_json=_canonical(prefix.tools or []),
        models=frozenset(m.name for m in prefix.served_models.all()),
    )


def shared_prefixes_active() -> tuple[SharedPrefixRecord, ...]:
    """Every active shared prefix (two queries), by name and newest version first."""
    rows = SharedPrefix.objects.filter(is_active=True).prefetch_related("served_models")
    return tuple(shared_prefix_record(row) for row in rows)
