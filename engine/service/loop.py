"""EngineService: the busy loop that connects an LLMEngine to Redis streams.

Each iteration has three named phases, and none of them waits on Redis:
``drain_inputs()`` (new requests and aborts through the RequestIntake, control commands and
adapter registry snapshots to reconcile, all from the Inbox), ``step()`` (one engine step) and
``publish()`` (the Outbox's PublishJob for the writer thread: ONE output entry per frontend
for everything this step produced).

When Redis stops taking outputs the writer keeps them and retries; past its bound the loop
stops stepping (backpressure), and after OUTAGE_FAIL_S it ends the started requests with an
error event, delivered when Redis is back, rather than generating for clients that gave up.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

import redis

from engine import protocol
from engine.outputs import EngineStats
from engine.service.adapter_registry import AdapterRegistry, RegistryWatcher
from engine.service.inbox import AbortEvent, ControlEvent, Inbox, NewRequest, RegistrySnapshot
from engine.service.outbox import ActiveRequest, Outbox
from engine.service.output_writer import OutputWriter
from engine.service.recovery import DeadEngineReaper
from engine.service.redis_io import (
    BroadcastReader,
    Channels,
    RequestReader,
    connect,
    ensure_group,
)
from engine.service.request_intake import RequestIntake
from engine.service.settings import ServiceSettings
from engine.service.status import EngineSnapshot, StatusPublisher

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05
# A Redis outage longer than the API's silence timeout (30 s): its clients have given up.
OUTAGE_FAIL_S = 30.0


class EngineService:
    """Runs ``engine`` (an LLMEngine) for one served model until drained or stopped."""

    def __init__(self, engine, settings: ServiceSettings):
        self.engine = engine
        self.settings = settings
        self.keys = protocol.Keys(settings.prefix)
        self.channels = Channels(self.keys, settings.model_name, settings.engine_id)
        self.inbox = Inbox()
        self.outbox = Outbox()
        self.adapters = AdapterRegistry(engine, settings.model_name)
        self.intake = RequestIntake(engine, self.outbox, self.adapters)
        self.num_steps = 0
        self.max_num_seqs = int(getattr(engine.config, "max_num_seqs", 256))
        self.draining = False
        self._stop_requested = threading.Event()
        self._drain_requested = False
        self._drain_deadline: float | None = None
        self._stats: EngineStats | None = engine.stats()
        # Read by the status thread; refreshed on the loop thread with the stats.
        self._lora_info: dict | None = engine.lora_requests_info()
        self._failed_for_outage = False
        self._paused = False  # backpressure: the writer's backlog is full

        def client() -> redis.Redis:
            return connect(settings.redis_url)

        self.redis = client()
        # No automatic retry: the writer decides itself whether a broken MULTI ran.
        self.writer = OutputWriter(connect(settings.redis_url, retries=0), self.channels)
        self.reader = RequestReader(
            client(),
            self.channels,
            self.inbox,
            bound=settings.queued_bound(self.max_num_seqs),
            waiting=self._num_waiting,
        )
        self.broadcast = BroadcastReader(client(), self.channels, self.inbox)
        self.registry_watcher = RegistryWatcher(
            client(),
            self.keys.adapters(settings.model_name),
            self.inbox,
            interval=settings.adapter_sync_interval,
        )
        self.reaper = DeadEngineReaper(
            client(), self.channels, self.reader, grace_s=2 * settings.status_interval + 0.5
        )
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

    @property
    def active(self) -> dict[str, ActiveRequest]:
        """Requests taken from the stream and not yet answered in full, by request id."""
        return self.outbox.active

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Announce this engine (status first, so it is alive before it joins the group)."""
        snapshot = self.registry_watcher.read()
        self.adapters.reconcile(snapshot.refs, snapshot.read_at)
        self.status.publish()
        ensure_group(self.redis, self.channels.requests)
        self.reaper.recover_own()
        threads = (self.writer, self.reader, self.broadcast, self.status, self.registry_watcher)
        for thread in threads:
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
        if self.writer.outage_s() == 0.0:
            self._failed_for_outage = False
        elif self.writer.outage_s() > OUTAGE_FAIL_S and not self._failed_for_outage:
            self.fail_for_outage()
        if self.writer.congested():
            # Redis is not taking outputs: produce no more until it does; nothing is dropped.
            if not self._paused:
                logger.warning(
                    "%d output writes waiting for Redis: steps paused", self.writer.backlog
                )
            self._paused = True
            if not self.writer.wait_for_room(IDLE_WAIT_S):
                return
        self._paused = False
        idle = not self.engine.has_unfinished_requests()
        self.drain_inputs(timeout=IDLE_WAIT_S if idle else 0.0)
        deltas = self.step()
        self.publish(deltas)

    # ------------------------------------------------------------------ the three phases

    def drain_inputs(self, timeout: float = 0.0) -> None:
        for event in self.inbox.take_all(timeout):
            if isinstance(event, NewRequest):
                self.intake.admit(event, draining=self.draining)
            elif isinstance(event, AbortEvent):
                self.intake.abort(event.request_id)
            elif isinstance(event, ControlEvent):
                self._control(event.message)
            elif isinstance(event, RegistrySnapshot):
                self.adapters.reconcile(event.refs, event.read_at)
        self.intake.forget_old_aborts()

    def step(self) -> list:
        if not self.engine.has_unfinished_requests():
            return []
        deltas = self.engine.step()
        self.num_steps += 1
        return deltas

    def publish(self, deltas: list) -> None:
        self.outbox.add_engine_deltas(deltas)
        self._stats = self.engine.stats()
        self._lora_info = self.engine.lora_requests_info()
        job = self.outbox.take_job()
        if job is not None:
            job.step = self.num_steps
            self.writer.submit(job)
        if deltas or self.inbox.num_requests == 0:
            self.reader.room_changed.set()

    # ------------------------------------------------------------------ control and drain

    def _control(self, message: protocol.ControlMessage) -> None:
        if isinstance(message, protocol.LoadAdapter):
            self.adapters.on_load_message(message.adapter)
        elif isinstance(message, protocol.UnloadAdapter):
            self.adapters.on_unload_message(message.name)
        elif isinstance(message, protocol.Drain) and message.engine_id in (
            "",
            self.settings.engine_id,
        ):
            self.request_drain()

    def begin_drain(self) -> None:
        """Stop taking requests; hand back every request that has produced nothing yet."""
        self.draining = True
        self._drain_deadline = time.monotonic() + self.settings.drain_timeout
        self.reader.stop()
        handed_back = [a for a in self.active.values() if not a.started]
        if handed_back:
            self.engine.abort_request([a.request.request_id for a in handed_back])
        for active in handed_back:
            del self.active[active.request.request_id]
            self.outbox.hand_back(active.entry_id, active.request)
        logger.info(
            "draining: %d requests handed back, %d running ones get %.0fs to finish",
            len(handed_back),
            len(self.active),
            self.settings.drain_timeout,
        )

    def fail_for_outage(self) -> None:
        """Redis has been unreachable for OUTAGE_FAIL_S: end started requests with an error
        (their clients timed out) and hand unstarted ones back; both reach Redis when it
        returns."""
        self._failed_for_outage = True
        if not self.active:
            return
        self.engine.abort_request(list(self.active))
        for active in list(self.active.values()):
            if active.started:
                self.outbox.abort_open_samples(
                    active, error="Redis was unreachable too long while running this request"
                )
            else:
                del self.active[active.request.request_id]
                self.outbox.hand_back(active.entry_id, active.request)
        logger.error("Redis unreachable for %.0fs: running requests failed", OUTAGE_FAIL_S)
        self.publish([])

    def shutdown(self) -> None:
        """Fail what is still running, flush outputs, withdraw from Redis, stop threads."""
        self.reader.stop()
        self.broadcast.stop()
        self.registry_watcher.stop()
        self.draining = True
        self.drain_inputs()  # requests the reader delivered last are handed back
        if self.active:
            self.engine.abort_request(list(self.active))
            for active in list(self.active.values()):
                self.outbox.abort_open_samples(
                    active, error="the engine shut down before this request finished"
                )
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

    def _snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(
            stats=self._stats,
            num_inbox_requests=self.inbox.num_requests,
            max_num_seqs=self.max_num_seqs,
            adapters=self.adapters.versions,
            draining=self.draining,
            num_steps=self.num_steps,
            lora_info=self._lora_info,
        )
