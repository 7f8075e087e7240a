"""EngineService: the busy loop that connects an LLMEngine to Redis streams.

Each iteration has three named phases, and none of them waits on Redis:
``drain_inputs()`` (new requests, aborts, control commands from the Inbox), ``step()`` (one
engine step) and ``publish()`` (one PublishJob for the writer thread: ONE output entry per
frontend for everything this step produced).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field

import redis

from engine import protocol
from engine.adapters import AdapterIdentity
from engine.outputs import EngineStats
from engine.service import convert
from engine.service.inbox import AbortEvent, ControlEvent, Inbox, NewRequest
from engine.service.recovery import DeadEngineReaper
from engine.service.redis_io import (
    BroadcastReader,
    Channels,
    OutputWriter,
    PublishJob,
    RequestReader,
    ensure_group,
)
from engine.service.settings import ServiceSettings
from engine.service.status import StatusPublisher

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05
# Aborts for requests this engine has not seen yet are remembered this long, for the race
# in which the abort overtakes its request between the Redis threads.
RECENT_ABORT_S = 60.0


@dataclass(slots=True)
class _Active:
    entry_id: str
    request: protocol.GenerateRequest
    open_indexes: set[int] = field(default_factory=set)
    started: bool = False


class EngineService:
    """Runs ``engine`` (an LLMEngine) for one served model until drained or stopped."""

    def __init__(self, engine, settings: ServiceSettings):
        self.engine = engine
        self.settings = settings
        self.keys = protocol.Keys(settings.prefix)
        self.channels = Channels(self.keys, settings.model_name, settings.engine_id)
        self.inbox = Inbox()
        self.active: dict[str, _Active] = {}
        self.recent_aborts: dict[str, float] = {}
        self.adapters: dict[str, AdapterIdentity] = {}
        self.num_steps = 0
        self.max_num_seqs = int(getattr(engine.config, "max_num_seqs", 256))
        self.draining = False
        self._stop_requested = threading.Event()
        self._drain_requested = False
        self._drain_deadline: float | None = None
        self._job = PublishJob()
        self._stats: EngineStats | None = engine.stats()
        # Read by the status thread; refreshed on the loop thread with the stats.
        self._lora_info: dict | None = engine.lora_requests_info()

        def client() -> redis.Redis:
            return redis.Redis.from_url(settings.redis_url)

        self.redis = client()
        self.writer = OutputWriter(client(), self.channels)
        self.reader = RequestReader(
            client(),
            self.channels,
            self.inbox,
            bound=settings.queued_bound(self.max_num_seqs),
            waiting=self._num_waiting,
        )
        self.broadcast = BroadcastReader(client(), self.channels, self.inbox)
        self.reaper = DeadEngineReaper(client(), self.channels, self.reader)
        self.status = StatusPublisher(
            client(),
            self.keys,
            model=settings.model_name,
            engine_id=settings.engine_id,
            interval=settings.status_interval,
            ttl=settings.status_ttl,
            snapshot=self._snapshot,
            on_tick=self.reaper.check,
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Announce this engine (status first, so it is alive before it joins the group)."""
        self._load_adapter_registry()
        self.status.publish()
        ensure_group(self.redis, self.channels.requests)
        for thread in (self.writer, self.reader, self.broadcast, self.status):
            thread.start()
        logger.info(
            "engine %s serving %r from %s",
            self.settings.engine_id,
            self.settings.model_name,
            self.channels.requests,
        )

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Serve until SIGTERM/SIGINT or a Drain command, then drain and withdraw."""
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self.request_drain())
            signal.signal(signal.SIGINT, lambda *_: self.request_drain())
        self.start()
        try:
            while not self._stop_requested.is_set():
                self.run_once()
                if self.draining and (not self.active or time.monotonic() > self._drain_deadline):
                    break
        finally:
            self.shutdown()

    def request_drain(self) -> None:
        """Signal-safe: the loop starts draining at its next iteration."""
        self._drain_requested = True

    def run_once(self) -> None:
        if self._drain_requested and not self.draining:
            self.begin_drain()
        idle = not self.engine.has_unfinished_requests()
        self.drain_inputs(timeout=IDLE_WAIT_S if idle else 0.0)
        deltas = self.step()
        self.publish(deltas)

    # ------------------------------------------------------------------ the three phases

    def drain_inputs(self, timeout: float = 0.0) -> None:
        for event in self.inbox.take_all(timeout):
            if isinstance(event, NewRequest):
                self._add(event)
            elif isinstance(event, AbortEvent):
                self._abort(event.request_id)
            elif isinstance(event, ControlEvent):
                self._control(event.message)
        if self.recent_aborts:
            cutoff = time.monotonic() - RECENT_ABORT_S
            for request_id in [k for k, t in self.recent_aborts.items() if t < cutoff]:
                del self.recent_aborts[request_id]

    def step(self) -> list:
        if not self.engine.has_unfinished_requests():
            return []
        deltas = self.engine.step()
        self.num_steps += 1
        return deltas

    def publish(self, deltas: list) -> None:
        job = self._job
        for delta in deltas:
            active = self.active.get(delta.request_id)
            if active is None:  # aborted or failed here already
                continue
            if not active.started:
                active.started = True
                job.started[active.entry_id] = protocol.StartedRecord(
                    active.request.request_id, active.request.frontend_id
                )
            job.add(active.request.frontend_id, convert.request_delta(delta))
            if delta.finished:
                active.open_indexes.discard(delta.index)
                if not active.open_indexes:
                    self._forget(active)
        self._stats = self.engine.stats()
        self._lora_info = self.engine.lora_requests_info()
        if job:
            job.step = self.num_steps
            self.writer.submit(job)
            self._job = PublishJob()
        if deltas or self.inbox.num_requests == 0:
            self.reader.room_changed.set()

    # ------------------------------------------------------------------ inputs

    def _add(self, event: NewRequest) -> None:
        request = event.request
        request_id = request.request_id
        if request_id in self.recent_aborts:
            del self.recent_aborts[request_id]
            self._finish_without_running(event.entry_id, request, finish_reason="abort")
            return
        if self.draining:
            self._job.requeue.append(request)
            self._job.done.append(event.entry_id)
            return
        if request_id in self.active:
            self._finish_without_running(
                event.entry_id, request, error=f"request id {request_id!r} is already running"
            )
            return
        try:
            params = convert.sampling_params(request.sampling)
            adapter = self._adapter_identity(request.adapter)
            # The engine orders by its monotonic clock; carry over the time spent queued.
            queued_for = max(0.0, time.time() - request.arrival_time)
            self.engine.add_request(
                request_id,
                request.prompt_token_ids,
                params,
                cache_salt=request.cache_salt or None,
                adapter=adapter,
                priority=request.priority,
                arrival_time=time.monotonic() - queued_for if request.arrival_time else None,
            )
        except (ValueError, TypeError) as exc:
            logger.info("request %s refused: %s", request_id, exc)
            self._finish_without_running(event.entry_id, request, error=str(exc))
            return
        self.active[request_id] = _Active(
            event.entry_id, request, open_indexes=set(range(request.sampling.n))
        )

    def _abort(self, request_id: str) -> None:
        active = self.active.get(request_id)
        if active is None:
            self.recent_aborts[request_id] = time.monotonic()
            return
        self.engine.abort_request([request_id])
        for index in sorted(active.open_indexes):
            self._job.add(
                active.request.frontend_id,
                protocol.RequestDelta(request_id=request_id, index=index, finish_reason="abort"),
            )
        self._forget(active)

    def _forget(self, active: _Active) -> None:
        self.active.pop(active.request.request_id, None)
        self._job.done.append(active.entry_id)

    def _finish_without_running(
        self,
        entry_id: str,
        request: protocol.GenerateRequest,
        *,
        finish_reason: str = "abort",
        error: str = "",
    ) -> None:
        for index in range(max(1, request.sampling.n)):
            self._job.add(
                request.frontend_id,
                protocol.RequestDelta(
                    request_id=request.request_id,
                    index=index,
                    finish_reason=finish_reason,
                    num_prompt_tokens=len(request.prompt_token_ids),
                    error=error,
                ),
            )
        self._job.done.append(entry_id)

    # ------------------------------------------------------------------ adapters and control

    def _load_adapter_registry(self) -> None:
        """Load the adapters the control plane published for this model before we started."""
        for name, raw in self.redis.hgetall(self.keys.adapters(self.settings.model_name)).items():
            try:
                ref = protocol.decode_adapter(raw)
            except Exception:
                logger.error("unreadable adapter record %r skipped", name)
                continue
            self._load_adapter(ref)

    def _load_adapter(self, ref: protocol.AdapterRef) -> None:
        try:
            identity = self.engine.load_adapter(ref.name, ref.path, ref.checksum)
        except Exception as exc:  # a bad adapter must not take the engine down
            logger.error("adapter %r from %s not loaded: %s", ref.name, ref.path, exc)
            return
        self.adapters[ref.name] = identity
        logger.info("adapter %r loaded (checksum %s)", ref.name, identity.checksum)

    def _adapter_identity(self, ref: protocol.AdapterRef | None) -> AdapterIdentity | None:
        if ref is None:
            return None
        identity = self.adapters.get(ref.name)
        if identity is None:
            raise ValueError(
                f"adapter {ref.name!r} is not loaded for model {self.settings.model_name!r}"
            )
        if ref.checksum and ref.checksum != identity.checksum:
            raise ValueError(
                f"adapter {ref.name!r} version {ref.checksum[:12]} is not loaded here "
                f"(loaded: {identity.checksum[:12]})"
            )
        return identity

    def _control(self, message: protocol.ControlMessage) -> None:
        if isinstance(message, protocol.LoadAdapter):
            self._load_adapter(message.adapter)
        elif isinstance(message, protocol.UnloadAdapter):
            self.engine.unload_adapter(message.name)
            self.adapters.pop(message.name, None)
            logger.info("adapter %r unloaded", message.name)
        elif isinstance(message, protocol.Drain) and message.engine_id in (
            "",
            self.settings.engine_id,
        ):
            self.request_drain()

    # ------------------------------------------------------------------ drain and shutdown

    def begin_drain(self) -> None:
        """Stop taking requests; hand back every request that has produced nothing yet."""
        self.draining = True
        self._drain_deadline = time.monotonic() + self.settings.drain_timeout
        self.reader.stop()
        handed_back = [a for a in self.active.values() if not a.started]
        if handed_back:
            self.engine.abort_request([a.request.request_id for a in handed_back])
        for active in handed_back:
            self.active.pop(active.request.request_id, None)
            self._job.requeue.append(active.request)
            self._job.done.append(active.entry_id)
        logger.info(
            "draining: %d requests handed back, %d running ones get %.0fs to finish",
            len(handed_back),
            len(self.active),
            self.settings.drain_timeout,
        )

    def shutdown(self) -> None:
        """Fail what is still running, flush outputs, withdraw from Redis, stop threads."""
        self.reader.stop()
        self.broadcast.stop()
        self.draining = True
        self.drain_inputs()  # requests the reader delivered last are handed back
        if self.active:
            self.engine.abort_request(list(self.active))
            for active in list(self.active.values()):
                for index in sorted(active.open_indexes):
                    self._job.add(
                        active.request.frontend_id,
                        protocol.RequestDelta(
                            request_id=active.request.request_id,
                            index=index,
                            finish_reason="abort",
                            error="the engine shut down before this request finished",
                        ),
                    )
                self._forget(active)
        self.publish([])
        self.status.stop()
        self.writer.close()
        try:
            self.status.withdraw()
            pending = self.redis.xpending_range(
                self.channels.requests,
                protocol.ENGINE_GROUP,
                min="-",
                max="+",
                count=1,
                consumername=self.settings.engine_id,
            )
            if not pending:  # otherwise a survivor must still claim them
                self.redis.xgroup_delconsumer(
                    self.channels.requests, protocol.ENGINE_GROUP, self.settings.engine_id
                )
                self.redis.delete(self.channels.started)
        except redis.RedisError:
            logger.warning("could not withdraw engine %s", self.settings.engine_id, exc_info=True)
        logger.info("engine %s stopped after %d steps", self.settings.engine_id, self.num_steps)

    def stop(self) -> None:
        """Leave the loop at the next iteration (tests); ``run`` then shuts down."""
        self._stop_requested.set()

    # ------------------------------------------------------------------ for the threads

    def _num_waiting(self) -> int:
        stats = self._stats
        return stats.num_waiting if stats is not None else 0

    def _snapshot(self):
        return (
            self._stats,
            self.inbox.num_requests,
            self.max_num_seqs,
            sorted(self.adapters),
            self.draining,
            self.num_steps,
            self._lora_info,
        )
