"""EngineService: the engine-core loop that connects an LLMEngine to Redis streams.

Each iteration has three phases, none of which waits on Redis: ``drain_inputs()`` (the Inbox
the reader threads fill), ``step()`` (one engine step) and ``publish()`` (one PublishJob for the
writer thread). While Redis takes no outputs the loop stops stepping past the writer's bound;
after OUTAGE_FAIL_S it ends the started requests with an error event, sent when Redis is back."""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from engine import protocol
from engine.config import ServiceSettings
from engine.core.block_hash import public_prefix_or_none
from engine.lora.registry import AdapterRegistry
from engine.outputs import RequestOutputDelta, Throughput
from engine.redis_outage import Worker
from engine.redis_streams import connect, ensure_group, publish_status, withdraw_status
from engine.sampling_params import SamplingParams
from engine.service import redis_input as inputs
from engine.service.hand_over import Starvation, hand_over
from engine.service.intake_order import intake_order
from engine.service.output_hold import OutputHold
from engine.service.prefix_index import PrefixIndexPublisher
from engine.service.read_ahead import ReadAhead
from engine.service.recovery import DeadEngineReaper
from engine.service.redis_output import OutputWriter, PublishJob
from engine.service.status_record import status_record
from engine.service.step_preemption import between_layers, first_steps

if TYPE_CHECKING:
    from engine.llm_engine import LLMEngine

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05
# A Redis outage longer than the API's silence timeout (30 s): its clients have given up.
OUTAGE_FAIL_S = 30.0
OUTAGE_ERROR = "Redis was unreachable too long while running this request"


@dataclass(slots=True)
class ActiveRequest:
    """A request taken from the stream that still has samples to answer."""

    entry_id: str  # XACK-ed with the last sample's last delta
    request: protocol.GenerateRequest
    open_indexes: set[int]
    # Once it produced output, draining can no longer hand it to another engine.
    started: bool = False


class EngineService:
    """Runs ``engine`` for one served model until drained or stopped. Redis is reached only
    from its threads: the two readers, the writer and the heartbeat."""

    def __init__(self, engine: LLMEngine, settings: ServiceSettings):
        self.engine, self.settings = engine, settings
        model, me, url = settings.model_name, settings.engine_id, settings.redis_url
        self.keys = protocol.Keys(settings.prefix)
        self.requests = self.keys.requests(model)
        self.direct_requests = self.keys.direct_requests(model, me)
        self.inbox = inputs.Inbox()
        self.active: dict[str, ActiveRequest] = {}  # taken and not answered in full, by id
        self.job = PublishJob()  # what this iteration will publish
        self.hold = OutputHold()  # later outputs of requests read whole (output_hold.py)
        self.adapters = AdapterRegistry(engine, model)
        self.recent_aborts: dict[str, float] = {}  # request id -> time.monotonic()
        self.num_steps = 0
        self.read_ahead = ReadAhead(engine.config, settings, self.keys)  # the reader's bound
        self.draining = False
        self._stop_requested = threading.Event()
        self._drain_requested, self._drain_deadline = False, 0.0
        self.stats = engine.stats()  # read by the heartbeat; replaced whole after each step
        self.throughput = Throughput()  # the heartbeat's
        self.started_at = time.time()

        self.redis = connect(url)  # the heartbeat's: status, dead engines, adapter registry
        # The status record's own, without retries of its own: the heartbeat retries it soon
        # (redis_outage.RETRY_AFTER_S), and a record missed after a restart means a 503.
        self.status_redis = connect(url, retries=0)
        # No automatic retry: the writer decides itself whether a broken MULTI ran.
        self.writer = OutputWriter(connect(url, retries=0), self.keys, model, me)
        self.reader = inputs.RequestReader(connect(url), self)
        self.broadcast = inputs.BroadcastReader(connect(url), self)
        self.reaper = DeadEngineReaper(self.redis, self)
        self.starvation = Starvation(me)  # tells idle peers
        self.prefix_index = PrefixIndexPublisher.for_engine(engine, self.keys, settings)
        self._next_registry_read = 0.0
        interval = min(settings.status_interval, settings.adapter_sync_interval)
        self.heartbeat = Worker("engine-heartbeat", self.beat, interval)
        self.intake_order = intake_order(engine.config.scheduling_policy)  # fair: fewest first
        if engine.enable_step_preemption(functools.partial(between_layers, self)):
            logger.info("step preemption on: returning tenants' requests run between layers")

    def start(self) -> None:
        """Announce this engine (status first, so it is alive before it joins the group)."""
        snapshot = self.read_registry()
        self.adapters.reconcile(self.adapters.readable(snapshot.records), snapshot.read_at)
        self._next_registry_read = time.monotonic() + self.settings.adapter_sync_interval
        self.publish_status(self.redis)
        ensure_group(self.redis, self.requests)
        self.reaper.take_over(self.settings.engine_id)  # an earlier life of this engine id
        ensure_group(self.redis, self.direct_requests)
        for thread in (self.writer, self.reader, self.broadcast, self.heartbeat):
            thread.start()
        me, model = self.settings.engine_id, self.settings.model_name
        logger.info("engine %s serving %r from %s", me, model, self.requests)

    def read_registry(self) -> inputs.RegistrySnapshot:
        read_at = time.monotonic()  # before the read: what changes during it is newer
        records = self.redis.hgetall(self.keys.adapters(self.settings.model_name))
        return inputs.RegistrySnapshot(records, read_at)

    def beat(self) -> None:
        """The heartbeat's tick: status record, dead engines, prefix index, read-ahead bound,
        adapters when due."""
        self.publish_status(self.status_redis)
        self.read_ahead.refresh(self.redis)
        self.reaper.check()
        if self.prefix_index is not None:
            self.prefix_index.publish(self.redis)
        if self.draining:  # routed here by a router that had not yet seen the drain
            self.reaper.move_direct(self.settings.engine_id, undelivered_only=True)
        if time.monotonic() >= self._next_registry_read:
            self._next_registry_read = time.monotonic() + self.settings.adapter_sync_interval
            self.inbox.put(self.read_registry())

    def publish_status(self, client: redis.Redis) -> None:
        """SET the status record (with a TTL, so that a crash leaves it to expire)."""
        publish_status(client, self.keys, status_record(self), self.settings.status_ttl)

    def room(self) -> int:
        """How many requests the reader may take now (backpressure: the rest wait for others)."""
        # The inbox before the stats: the loop replaces the stats before it settles the inbox,
        # so a request taken meanwhile may count twice here, never not at all.
        uncounted = self.inbox.num_uncounted
        return self.read_ahead.bound - self.stats.num_waiting - uncounted

    def run(self) -> None:
        """Serve until SIGTERM/SIGINT or a Drain command, then drain and withdraw."""
        if threading.current_thread() is threading.main_thread():
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

    def stop(self) -> None:
        """Leave the loop at the next iteration (tests); ``run`` then shuts down."""
        self._stop_requested.set()

    def run_once(self) -> None:
        if self._drain_requested and not self.draining:
            self.begin_drain()
        self.writer.raise_if_failed()  # outputs can no longer be written: exit, fail over
        if self.active and self.writer.outage_s() > OUTAGE_FAIL_S:
            self.fail_for_outage()
        if self.writer.congested() and not self.writer.wait_for_room(IDLE_WAIT_S):
            return  # Redis is not taking outputs: produce no more until it does
        idle = not self.engine.has_unfinished_requests()
        if admitted := self.drain_inputs(timeout=IDLE_WAIT_S if idle else 0.0):
            first_steps(self, admitted)  # short prompts ahead of the batch's next step
        self.publish(self.step())

    def drain_inputs(self, timeout: float = 0.0) -> list[str]:
        admitted = []  # ids of the requests added to the engine
        sliced = self.engine.preempts and not self.draining  # while draining, all handed back
        events, later = self.intake_order(self.inbox.take_all(timeout), sliced)
        self.inbox.defer(later)
        for event in events:
            match event:
                case inputs.NewRequest():
                    if self.admit(event.entry_id, event.request):
                        admitted.append(event.request.request_id)
                case protocol.AbortRequest() if event.request_id in self.active:
                    self._end([event.request_id])
                case protocol.AbortRequest():
                    self.recent_aborts[event.request_id] = time.monotonic()
                case protocol.Idle():
                    hand_over(self, event)
                case inputs.RegistrySnapshot():
                    self.adapters.reconcile(self.adapters.readable(event.records), event.read_at)
                case protocol.LoadAdapter():
                    self.adapters.on_load_message(event.adapter)
                case protocol.UnloadAdapter():
                    self.adapters.on_unload_message(event.name)
                case protocol.Drain() if event.engine_id in ("", self.settings.engine_id):
                    self.request_drain()
        if self.recent_aborts:
            cutoff = time.monotonic() - inputs.RECENT_ABORT_S
            self.recent_aborts = {k: t for k, t in self.recent_aborts.items() if t >= cutoff}
        return admitted

    def step(self) -> list[RequestOutputDelta]:
        if not self.engine.has_unfinished_requests():
            return []
        self.num_steps += 1
        return self.engine.step()

    def publish(self, deltas: list[RequestOutputDelta]) -> None:
        for delta in deltas:
            active = self.active.get(delta.request_id)
            if active is None:  # aborted or failed here already
                continue
            frontend, message = active.request.frontend_id, delta.to_message()
            if not active.started:
                active.started = True
                record = protocol.StartedRecord(delta.request_id, frontend)
                self.job.started[active.entry_id] = record
            elif not active.request.stream_outputs:  # read whole: merged until it ends
                message = self.hold.take(frontend, message)
            if message is not None:
                self.job.add(frontend, message)
            if delta.finished:
                active.open_indexes.discard(delta.index)
                if not active.open_indexes:
                    del self.active[delta.request_id]
                    self.job.done.append(active.entry_id)
        for frontend, message in self.hold.due():
            self.job.add(frontend, message)
        self.stats = self.engine.stats()
        self.inbox.settle()  # after the stats (see ``room``)
        if not self.draining:
            self.job.idle = self.starvation.check(self.stats, self.inbox.num_requests, self.room())
        if self.job:
            self.job.step = self.num_steps
            self.writer.submit(self.job)
            self.job = PublishJob()
        if deltas or self.inbox.num_requests == 0:
            self.reader.room_changed.set()

    def admit(self, entry_id: str, request: protocol.GenerateRequest) -> bool:
        """Add the request to the engine (True), or answer it at once if it cannot run here."""
        request_id = request.request_id
        if self.recent_aborts.pop(request_id, None) is not None:
            self._answer_without_running(entry_id, request)
            return False
        if self.draining:
            self.job.hand_back(entry_id, request)
            return False
        running = self.active.get(request_id)
        if running is not None and running.request.frontend_id == request.frontend_id:
            # The same submission twice (a client's retry after a dropped connection): the
            # running copy answers it; this entry is only acknowledged. Another frontend's
            # request under a running id is refused by the engine below (the id is in use).
            logger.warning("duplicate entry %s of request %s", entry_id, request_id)
            self.job.done.append(entry_id)
            return False
        # The engine orders by its monotonic clock; carry over the time spent queued.
        queued_for = max(0.0, time.time() - request.arrival_time)
        try:
            self.engine.add_request(
                request_id,
                request.prompt_token_ids,
                SamplingParams.from_options(request.sampling),
                cache_salt=request.cache_salt or None,
                adapter=self.adapters.identity_for(request.adapter),
                priority=request.priority,
                arrival_time=time.monotonic() - queued_for if request.arrival_time else None,
                resumed_output_tokens=request.resumed_output_tokens,
                public_prefix=public_prefix_or_none(
                    request.shared_prefix_salt, request.shared_prefix_tokens
                ),
                tenant=request.tenant,
                weight=request.weight,
                service_class=request.service_class,
            )
        except (ValueError, TypeError) as exc:
            logger.info("request %s refused: %s", request_id, exc)
            self._answer_without_running(entry_id, request, error=str(exc))
            return False
        indexes = set(range(request.sampling.n))
        self.active[request_id] = ActiveRequest(entry_id, request, open_indexes=indexes)
        return True

    def _answer_without_running(self, entry_id, request, *, error: str = "") -> None:
        """Answer a request that never reached the engine (refused, or aborted first)."""
        indexes, num_prompt = range(max(1, request.sampling.n)), len(request.prompt_token_ids)
        self.job.abort(entry_id, request, indexes, error=error, num_prompt_tokens=num_prompt)

    def _end(self, request_ids: list[str], *, error: str = "") -> None:
        """Abort the requests in the engine and answer each sample still open as aborted."""
        self.engine.abort_request(request_ids)
        self.hold.discard(request_ids)
        for a in map(self.active.pop, request_ids):
            self.job.abort(a.entry_id, a.request, sorted(a.open_indexes), error=error)

    def _hand_back_unstarted(self) -> int:
        """Put every request that has produced nothing yet back on the stream."""
        unstarted = [request_id for request_id, a in self.active.items() if not a.started]
        self.engine.abort_request(unstarted)
        for active in map(self.active.pop, unstarted):
            self.job.hand_back(active.entry_id, active.request)
        return len(unstarted)

    def begin_drain(self) -> None:
        """Stop taking requests; hand back every request that has produced nothing yet."""
        self.draining = True
        self._drain_deadline = time.monotonic() + (timeout := self.settings.drain_timeout)
        self.reader.stop()
        message = "draining: %d requests handed back, %d running ones get %.0fs to finish"
        logger.info(message, self._hand_back_unstarted(), len(self.active), timeout)

    def fail_for_outage(self) -> None:
        """Redis unreachable for OUTAGE_FAIL_S: end started requests with an error (their
        clients timed out), hand unstarted ones back; both reach Redis when it returns. Once
        per outage: no request is taken while Redis is away, so none is active until then."""
        self._hand_back_unstarted()
        self._end(list(self.active), error=OUTAGE_ERROR)
        logger.error("Redis unreachable for %.0fs: running requests failed", OUTAGE_FAIL_S)
        self.publish([])

    def shutdown(self) -> None:
        """Fail what is still running, flush outputs, withdraw from Redis, stop threads."""
        for thread in (self.reader, self.broadcast, self.heartbeat):
            thread.stop()
        self.draining = True
        self.drain_inputs()  # requests the reader delivered last are handed back
        self._end(list(self.active), error="the engine shut down before this request finished")
        self.publish([])
        self.writer.close()
        me, model = self.settings.engine_id, self.settings.model_name
        try:
            withdraw_status(self.redis, self.keys, model, me)
            self.reaper.withdraw_own()
            if self.prefix_index is not None:
                self.prefix_index.withdraw(self.redis)
        except redis.RedisError:
            logger.warning("could not withdraw engine %s", me, exc_info=True)
        logger.info("engine %s stopped after %d steps", me, self.num_steps)
