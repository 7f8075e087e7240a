"""The engine's status record (protocol.EngineStatus) as its heartbeat publishes it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from engine import protocol

if TYPE_CHECKING:
    from engine.service.loop import EngineService


def status_record(service: EngineService) -> protocol.EngineStatus:
    """The record for ``service`` now; read from the heartbeat thread. Only the loop thread
    changes what it reads, and each of those is replaced whole, so it is safe to read here."""
    stats, adapters, config = service.stats, service.adapters.versions, service.engine.config
    status = protocol.EngineStatus(
        **dataclasses.asdict(stats),  # EngineStats' fields have EngineStatus's names
        engine_id=service.settings.engine_id,
        model=service.settings.model_name,
        adapters=sorted(adapters),
        adapter_checksums=dict(adapters),
        tokens_per_s=round(service.throughput.rate(stats.generation_tokens_total), 2),
        started_at=service.started_at,
        draining=service.draining,
        num_steps=service.num_steps,
        block_size=config.block_size if service.prefix_index is not None else 0,
        scheduling_policy=config.scheduling_policy,
        queue_bound=service.read_ahead.bound,
        num_handed_over=service.starvation.num_handed_over,
        num_idle_announcements=service.starvation.num_announced,
    )
    status.num_waiting += service.inbox.num_uncounted
    return status
