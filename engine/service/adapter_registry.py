"""The LoRA adapters this engine serves, by name: loaded from the control plane's registry at
start and on LoadAdapter / UnloadAdapter, and resolved for each request."""

from __future__ import annotations

import logging

import redis

from engine import protocol
from engine.adapters import AdapterIdentity

logger = logging.getLogger(__name__)


class AdapterRegistry:
    def __init__(self, engine, model_name: str):
        self.engine = engine
        self.model_name = model_name
        self.identities: dict[str, AdapterIdentity] = {}

    def names(self) -> list[str]:
        return sorted(self.identities)

    def load_published(self, client: redis.Redis, keys: protocol.Keys) -> None:
        """Load the adapters the control plane published for this model before we started."""
        for name, raw in client.hgetall(keys.adapters(self.model_name)).items():
            try:
                ref = protocol.decode_adapter(raw)
            except Exception:
                logger.error("unreadable adapter record %r skipped", name)
                continue
            self.load(ref)

    def load(self, ref: protocol.AdapterRef) -> None:
        try:
            identity = self.engine.load_adapter(ref.name, ref.path, ref.checksum)
        except Exception as exc:  # a bad adapter must not take the engine down
            logger.error("adapter %r from %s not loaded: %s", ref.name, ref.path, exc)
            return
        self.identities[ref.name] = identity
        logger.info("adapter %r loaded (checksum %s)", ref.name, identity.checksum)

    def unload(self, name: str) -> None:
        self.engine.unload_adapter(name)
        self.identities.pop(name, None)
        logger.info("adapter %r unloaded", name)

    def identity_for(self, ref: protocol.AdapterRef | None) -> AdapterIdentity | None:
        """The loaded identity a request asks for; ValueError if that version is not here."""
        if ref is None:
            return None
        identity = self.identities.get(ref.name)
        if identity is None:
            raise ValueError(f"adapter {ref.name!r} is not loaded for model {self.model_name!r}")
        if ref.checksum and ref.checksum != identity.checksum:
            raise ValueError(
                f"adapter {ref.name!r} version {ref.checksum[:12]} is not loaded here "
                f"(loaded: {identity.checksum[:12]})"
            )
        return identity
