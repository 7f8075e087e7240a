"""ServiceSettings: what an engine service needs beyond the engine's own EngineConfig."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from engine.protocol import new_engine_id, redis_prefix


@dataclass(slots=True)
class ServiceSettings:
    """Where to read and write, and how the service paces itself.

    ``max_queued`` is the backpressure bound: the service reads more requests from Redis only
    while fewer than this many wait in its scheduler (or its inbox), so the rest stay in the
    stream for other replicas. None: a quarter of ``max_num_seqs``, at least 16.
    ``adapter_sync_interval``: how often the adapter registry is read again and reconciled.
    """

    model_name: str
    redis_url: str = field(
        default_factory=lambda: os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    prefix: str = field(default_factory=redis_prefix)
    engine_id: str = field(default_factory=new_engine_id)
    status_interval: float = 1.0
    status_ttl: float = 5.0
    drain_timeout: float = 30.0
    max_queued: int | None = None
    adapter_sync_interval: float = 2.0

    def __post_init__(self) -> None:
        if not self.model_name or ":" in self.engine_id:
            raise ValueError("model_name must be set and engine_id must not contain ':'")
        if self.status_interval <= 0 or self.status_ttl <= self.status_interval:
            raise ValueError(
                f"status_ttl ({self.status_ttl}) must exceed status_interval "
                f"({self.status_interval}), both positive"
            )
        if self.drain_timeout < 0:
            raise ValueError(f"drain_timeout must be >= 0, got {self.drain_timeout}")
        if self.max_queued is not None and self.max_queued < 1:
            raise ValueError(f"max_queued must be >= 1, got {self.max_queued}")
        if self.adapter_sync_interval <= 0:
            raise ValueError(
                f"adapter_sync_interval must be positive, got {self.adapter_sync_interval}"
            )

    def queued_bound(self, max_num_seqs: int) -> int:
        return self.max_queued if self.max_queued is not None else max(16, max_num_seqs // 4)
