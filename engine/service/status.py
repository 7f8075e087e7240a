"""The status thread: publishes the liveness record every second and reaps dead engines."""

from __future__ import annotations

import collections
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import redis

from engine import protocol
from engine.outputs import EngineStats
from engine.service.redis_io import PeriodicThread

logger = logging.getLogger(__name__)

# Throughput is averaged over this many seconds of samples.
RATE_WINDOW_S = 5.0


class TokenRate:
    """Generated tokens per second over a sliding window of (time, total) samples."""

    def __init__(self, window: float = RATE_WINDOW_S):
        self.window = window
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def update(self, now: float, total: int) -> float:
        self._samples.append((now, total))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.window:
            self._samples.popleft()
        first_t, first_total = self._samples[0]
        return (total - first_total) / (now - first_t) if now > first_t else 0.0


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """The loop's state as the status record reports it, taken by the status thread."""

    stats: EngineStats | None
    num_inbox_requests: int  # read from the stream, not yet in the engine
    max_num_seqs: int
    adapters: Mapping[str, str]  # loaded adapters: name -> checksum
    draining: bool
    num_steps: int
    lora_info: dict | None  # LLMEngine.lora_requests_info()


class StatusPublisher(PeriodicThread):
    """Every ``interval``: SET the status record with a TTL, then look for dead engines."""

    def __init__(
        self,
        client: redis.Redis,
        keys: protocol.Keys,
        *,
        model: str,
        engine_id: str,
        interval: float,
        ttl: float,
        snapshot: Callable[[], EngineSnapshot],
        on_tick: Callable[[], None] | None = None,
    ):
        super().__init__("engine-status", interval)
        self.client = client
        self.keys = keys
        self.model = model
        self.engine_id = engine_id
        self.ttl_ms = int(ttl * 1000)
        self.snapshot = snapshot
        self.on_tick = on_tick
        self.started_at = time.time()
        self.rate = TokenRate()

    def build(self) -> protocol.EngineStatus:
        snapshot = self.snapshot()
        stats, lora_info = snapshot.stats, snapshot.lora_info
        now = time.time()
        status = protocol.EngineStatus(
            engine_id=self.engine_id,
            model=self.model,
            adapters=sorted(snapshot.adapters),
            adapter_checksums=dict(snapshot.adapters),
            started_at=self.started_at,
            updated_at=now,
            draining=snapshot.draining,
            max_num_seqs=snapshot.max_num_seqs,
            num_steps=snapshot.num_steps,
            num_waiting=snapshot.num_inbox_requests,
            pid=os.getpid(),
            hostname=socket.gethostname(),
        )
        if stats is not None:
            status.kv_cache_usage = stats.kv_cache_usage
            status.num_running = stats.num_running
            status.num_waiting += stats.num_waiting
            status.num_free_blocks = stats.num_free_blocks
            status.num_total_blocks = stats.num_total_blocks
            status.prompt_tokens_total = stats.prompt_tokens_total
            status.generation_tokens_total = stats.generation_tokens_total
            status.prefix_cache_queries = stats.prefix_cache_queries
            status.prefix_cache_hits = stats.prefix_cache_hits
            status.num_preemptions = stats.num_preemptions
            status.tokens_per_s = round(self.rate.update(now, stats.generation_tokens_total), 2)
        if lora_info is not None:
            status.running_lora_adapters = list(lora_info["running_lora_adapters"])
            status.waiting_lora_adapters = list(lora_info["waiting_lora_adapters"])
            status.max_lora = int(lora_info["max_lora"])
        return status

    def publish(self) -> None:
        status = self.build()
        pipe = self.client.pipeline(transaction=False)
        pipe.set(
            self.keys.status(self.model, self.engine_id),
            protocol.encode_status(status),
            px=self.ttl_ms,
        )
        pipe.sadd(self.keys.engines(), protocol.engine_member(self.model, self.engine_id))
        pipe.execute()

    def withdraw(self) -> None:
        """Remove this engine's record at a clean exit (a crash leaves it to expire)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(self.keys.status(self.model, self.engine_id))
        pipe.srem(self.keys.engines(), protocol.engine_member(self.model, self.engine_id))
        pipe.execute()

    def tick(self) -> None:
        try:
            self.publish()
        except redis.RedisError as exc:
            logger.warning("publishing engine status failed: %s", exc)  # next tick retries
        if self.on_tick is not None:
            try:
                self.on_tick()
            except Exception:
                logger.exception("dead-engine recovery failed; will retry")
