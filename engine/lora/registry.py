"""The LoRA adapters an engine serves, kept equal to a published registry.

The control plane's registry (name -> AdapterRef; docs/protocol.md) says what every engine of
a model should hold. LoadAdapter / UnloadAdapter messages bring changes at once, and the
service reads the registry again every few seconds (``reconcile``): load what is missing or
of another version, unload what is gone. A lost control message, or a Redis restart the
control plane has since healed, costs at most one beat. An adapter that fails to load is
logged and retried with backoff, and never stops the engine; so is an unreadable record, once.
No Redis here: the service's heartbeat reads the registry hash and hands its records over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from engine import protocol
from engine.adapters import AdapterIdentity

if TYPE_CHECKING:
    from engine.llm_engine import LLMEngine

logger = logging.getLogger(__name__)

# An adapter that failed to load is tried again by the reconcile after this long, doubling
# up to RETRY_MAX_S; a new version of it (another AdapterRef) is tried at once.
RETRY_FIRST_S = 10.0
RETRY_MAX_S = 300.0


@dataclass(slots=True)
class _LoadFailure:
    ref: protocol.AdapterRef
    attempts: int
    retry_at: float  # clock() time


class AdapterRegistry:
    """The adapters loaded in this engine, by name. Only the loop thread calls its methods;
    ``versions`` (name -> checksum) is replaced whole on every change, for the heartbeat thread.
    """

    def __init__(
        self, engine: LLMEngine, model_name: str, *, clock: Callable[[], float] = time.monotonic
    ):
        self.engine = engine
        self.model_name = model_name
        self.clock = clock
        self.identities: dict[str, AdapterIdentity] = {}
        self.versions: Mapping[str, str] = MappingProxyType({})
        self._refs: dict[str, protocol.AdapterRef] = {}  # what each loaded adapter came from
        self._failures: dict[str, _LoadFailure] = {}
        # When a control message last named an adapter: a registry snapshot read before that
        # may predate the change, so the reconcile leaves that name alone.
        self._announced_at: dict[str, float] = {}
        self._unreadable: set[bytes] = set()  # records logged as unreadable

    def names(self) -> list[str]:
        return sorted(self.identities)

    # ------------------------------------------------------------------ control messages

    def on_load_message(self, ref: protocol.AdapterRef) -> None:
        self._announced_at[ref.name] = self.clock()
        self.load(ref)

    def on_unload_message(self, name: str) -> None:
        self._announced_at[name] = self.clock()
        self.unload(name)

    # ------------------------------------------------------------------ reconcile

    def readable(self, records: Mapping[bytes, bytes]) -> dict[str, protocol.AdapterRef]:
        """The registry hash's records (name -> encoded AdapterRef) as name -> AdapterRef. An
        unreadable record, or one naming another adapter, is left out (as if withdrawn) and
        logged once."""
        refs: dict[str, protocol.AdapterRef] = {}
        for raw_name, raw in records.items():
            name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
            try:
                ref = protocol.decode_adapter(raw)
                if ref.name != name:
                    raise ValueError(f"record names {ref.name!r}")
                refs[name] = ref
            except ValueError as exc:  # msgspec's errors are ValueErrors
                if raw not in self._unreadable:
                    logger.error(
                        "unreadable adapter record %r of %r skipped: %s", name, self.model_name, exc
                    )
                    self._unreadable.add(raw)
        return refs

    def reconcile(self, published: Mapping[str, protocol.AdapterRef], read_at: float) -> None:
        """Make the loaded adapters those of the registry as read at ``read_at``."""
        now = self.clock()
        for name in [n for n in self.identities if n not in published]:
            if not self._announced_since(name, read_at):
                self.unload(name)
        for name, ref in published.items():
            if self._refs.get(name) == ref or self._announced_since(name, read_at):
                continue
            failure = self._failures.get(name)
            if failure is not None and failure.ref == ref and now < failure.retry_at:
                continue  # backing off
            self.load(ref)
        for name in [n for n in self._failures if n not in published]:
            del self._failures[name]
        self._announced_at = {n: t for n, t in self._announced_at.items() if t > read_at}

    def _announced_since(self, name: str, read_at: float) -> bool:
        return self._announced_at.get(name, float("-inf")) > read_at

    # ------------------------------------------------------------------ load and unload

    def load(self, ref: protocol.AdapterRef) -> bool:
        """Load ``ref`` (a no-op when exactly this is loaded); False if it could not be."""
        if self._refs.get(ref.name) == ref:
            return True
        try:
            identity = self.engine.load_adapter(ref.name, ref.path, ref.checksum)
        except Exception as exc:  # a bad adapter must not take the engine down
            self._record_failure(ref, exc)
            return False
        self._failures.pop(ref.name, None)
        self.identities[ref.name] = identity
        self._refs[ref.name] = ref
        self._publish_versions()
        logger.info("adapter %r loaded (checksum %s)", ref.name, identity.checksum)
        return True

    def unload(self, name: str) -> None:
        self._failures.pop(name, None)
        try:
            self.engine.unload_adapter(name)
        except Exception:
            logger.exception("unloading adapter %r failed", name)
        if self.identities.pop(name, None) is not None:
            self._refs.pop(name, None)
            self._publish_versions()
            logger.info("adapter %r unloaded", name)

    def _record_failure(self, ref: protocol.AdapterRef, exc: Exception) -> None:
        previous = self._failures.get(ref.name)
        attempts = previous.attempts + 1 if previous is not None and previous.ref == ref else 1
        delay = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (attempts - 1))
        self._failures[ref.name] = _LoadFailure(ref, attempts, self.clock() + delay)
        logger.error(
            "adapter %r from %s not loaded (attempt %d, next in %.0fs): %s",
            ref.name,
            ref.path,
            attempts,
            delay,
            exc,
        )

    def _publish_versions(self) -> None:
        self.versions = MappingProxyType({n: i.checksum for n, i in self.identities.items()})

    # ------------------------------------------------------------------ requests

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
