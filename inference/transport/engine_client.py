"""The async transport API processes use to run generations on engines over Redis.

One client per process (per event loop): it submits EngineRequests to a model's request
stream (refusing fast when no engine is live or too much work waits), and a single reader task
reads this frontend's output stream and fans each delta out to the queue of the request it
belongs to (output_fanout.py). Per-sample output processing (detokenization, stop strings) is
output_processor.py's. Imports nothing heavy, so API processes never load torch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import msgspec
import redis.asyncio as aioredis

from controlplane.common.cancellation import raise_if_cancelled
from controlplane.common.redis_pools import async_blocking_pool
from controlplane.common.tenant_lanes import leave_lane
from engine import protocol
from engine.protocol import FIELD, EngineStatus, Keys, SamplingOptions
from engine.redis_outage import warn_failure
from engine.text.detokenizer import Decoder
from inference.transport.engine_capacity import EngineCapacity, EngineOverloaded, EngineUnavailable
from inference.transport.engine_request import EngineRequest
from inference.transport.failover import Failover
from inference.transport.output_continuity import LOST_MESSAGE, OutputContinuity
from inference.transport.output_fanout import OutputFanOut
from inference.transport.output_processor import GenerationChunk, RequestOutputProcessor, TokenTexts
from inference.transport.prefix_router import PrefixRouter
from inference.transport.silence_watch import SILENT, DeltaQueue, SilenceWatch
from inference.transport.tenant_backlog import PER_ENGINE, TenantBacklog

logger = logging.getLogger(__name__)

__all__ = [
    "EngineClient",
    "EngineError",
    "EngineOverloaded",
    "EngineTimeout",
    "EngineUnavailable",
    "SamplingOptions",
]

# An abort marker outlives any request that could still be sitting in a stream.
ABORT_MARKER_TTL_S = 600
# A request may stay silent this many silence timeouts while live engines exist: queued behind
# others, or preempted on an overloaded engine. A dead engine's started requests do not wait
# for this: a survivor reports them lost within seconds (engine_lost) and they resume at once.
QUEUED_PATIENCE = 10


class EngineError(Exception):
    """The engine failed or died while running the request (a stream error event)."""


class EngineRefusal(EngineError):
    """The engine ended the request for something the request itself asked for (its
    constraints allow no token): the client's error, with its OpenAI error ``code``."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class EngineTimeout(EngineError):
    """The engine stayed silent longer than ENGINE_SILENCE_TIMEOUT."""


class EngineClient:
    """Submits generations to engines and streams their outputs back (see module docstring)."""

    _instances: ClassVar[dict[int, tuple[Any, EngineClient]]] = {}

    def __init__(
        self,
        redis_url: str,
        *,
        prefix: str = "llmp",
        silence_timeout: float = 30.0,
        max_waiting: int = 1024,
        frontend_id: str | None = None,
        wake_timeout_s: float | None = None,
        prefix_routing: bool = True,
        tenant_queued_per_engine: int = PER_ENGINE,
    ):
        # redis-py's asyncio pool raises once its 100 connections are busy; a blocking pool
        # makes a burst of requests wait their turn instead (the URL's max_connections wins).
        # Pools that reconnect after a Redis restart (controlplane/common/redis_pools.py).
        self.redis = aioredis.Redis(
            connection_pool=async_blocking_pool(redis_url, max_connections=512, timeout=10)
        )
        self.keys = Keys(prefix)
        self.silence = SilenceWatch(silence_timeout)
        self.frontend_id = frontend_id or protocol.new_frontend_id()
        self.capacity = EngineCapacity(
            self.redis,
            self.keys,
            max_waiting=max_waiting,
            wake_timeout_s=wake_timeout_s,
            frontend_id=self.frontend_id,
        )
        self.router = PrefixRouter(self.redis, self.keys) if prefix_routing else None
        self.backlog = TenantBacklog(tenant_queued_per_engine)
        self.outputs = OutputFanOut(redis_url, self.redis, self.keys, self.frontend_id)
        self._background: set[asyncio.Task] = set()
        self._token_texts: dict[int, TokenTexts] = {}

    @classmethod
    def for_process(cls) -> EngineClient:
        """The client of this process and event loop, configured from Django settings."""
        from django.conf import settings

        try:
            loop: Any = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        entry = cls._instances.get(key := id(loop))
        if entry is None or entry[0] is not loop:
            client = cls(
                settings.REDIS_URL,
                prefix=settings.PLATFORM_REDIS_PREFIX,
                silence_timeout=float(settings.ENGINE_SILENCE_TIMEOUT),
                max_waiting=int(settings.ENGINE_MAX_WAITING),
                wake_timeout_s=float(settings.FLEET_WAKE_TIMEOUT_S),
                prefix_routing=bool(getattr(settings, "PREFIX_ROUTING", True)),
                tenant_queued_per_engine=int(settings.TENANT_QUEUED_PER_ENGINE),
            )
            cls._instances[key] = (loop, client)
            return client
        return entry[1]

    @property
    def silence_timeout(self) -> float:
        """Seconds without output after which a waiting request checks on its engine."""
        return self.silence.timeout

    @silence_timeout.setter
    def silence_timeout(self, value: float) -> None:
        self.silence.timeout = value

    @property
    def max_waiting(self) -> int:
        return self.capacity.max_waiting

    @max_waiting.setter
    def max_waiting(self, value: int) -> None:
        self.capacity.max_waiting = value

    # ------------------------------------------------------------------ public API

    async def generate(
        self, request: EngineRequest, tokenizer: Decoder
    ) -> AsyncIterator[GenerationChunk]:
        """Run one engine request; yields chunks until every sample has finished.

        Closing the iterator early (aclose, cancellation, a client disconnect) aborts the
        request in the engine.
        """
        model, message = request.model, request.message
        prompt_token_ids = message.prompt_token_ids
        # Every id an int (not a bool), the types' set built in C: 11 us of the event loop for
        # 1,000 ids, against 41 us for two isinstance calls per id in a generator.
        if not prompt_token_ids or set(map(type, prompt_token_ids)) != {int}:
            raise ValueError("prompt_token_ids must be a non-empty list of token ids")
        request_id = message.request_id
        if self.outputs.routed(request_id):
            raise ValueError(f"request id {request_id!r} is already in flight")
        await self.capacity.check(model, message.adapter, held_here=self.backlog.held(model))
        message = msgspec.structs.replace(
            message, frontend_id=self.frontend_id, arrival_time=time.time()
        )
        sampling = message.sampling
        outputs = RequestOutputProcessor(request, tokenizer, token_texts=self._texts_for(tokenizer))
        engine_finished: set[int] = set()
        failover = Failover(self, model, message)
        continuity = OutputContinuity()
        fair_engines = sum(s.schedules_fairly for s in await self.capacity.routable(model))
        frontends = self.capacity.frontends(model)
        raise_if_cancelled()  # redis-py may have dropped it (cancellation.py): wait for nothing
        held_from = time.monotonic()
        place = await self.backlog.enter(
            model, message, fair_engines, frontends, on_wait=leave_lane
        )
        outputs.held_s = time.monotonic() - held_from
        queue = self.silence.queue()
        self.outputs.route(request_id, queue)  # nothing between this and the try's cleanup can fail
        try:
            raise_if_cancelled()
            if self.router is None:
                await self.submit(model, [message])
            else:
                await self.router.send(model, message, await self.capacity.routable(model))
            leave_lane()  # from here on it waits on the engine, not on this process
            got_output = False
            while outputs.num_open:
                try:
                    delta = await self._next_delta(queue, model, request_id)
                except EngineTimeout:  # a started request's engine went silent: move it
                    lost = failover.engine_request_ids
                    if got_output and await failover.resume(lost, outputs, queue):
                        continue
                    raise
                if not continuity.intact(delta):
                    engine_finished.update(range(sampling.n))
                    raise EngineError(LOST_MESSAGE)
                delta = failover.translate(delta)
                if delta is None:  # from an engine request replaced by a resumed one
                    continue
                got_output = True
                place.leave()  # started (or failed): the tenant's next request may go
                if delta.error:
                    lost = [delta.request_id]
                    if delta.engine_lost and await failover.resume(lost, outputs, queue):
                        continue
                    engine_finished.update(range(sampling.n))
                    if delta.error_code:
                        raise EngineRefusal(delta.error, delta.error_code)
                    raise EngineError(delta.error)
                if not 0 <= delta.index < sampling.n:
                    logger.warning("delta for %s has bad index %d", request_id, delta.index)
                    continue
                if delta.finish_reason is not None:
                    engine_finished.add(delta.index)
                chunk = outputs.process(delta)
                if chunk is not None:
                    yield chunk
        finally:
            place.leave()
            self.silence.forget(queue)
            for engine_request_id in failover.engine_request_ids:
                self.outputs.unroute(engine_request_id)
                if len(engine_finished) < sampling.n:
                    self.abort_soon(engine_request_id)

    async def submit(self, model: str, messages: list[protocol.GenerateRequest]) -> None:
        """Add ``messages`` to ``model``'s request stream, in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for message in messages:
                pipe.xadd(self.keys.requests(model), {FIELD: protocol.encode(message)})
            await pipe.execute()

    async def abort(self, request_id: str) -> None:
        """Abort a request wherever it is: still in a stream, claimed, or running."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(self.keys.aborted(request_id), b"1", ex=ABORT_MARKER_TTL_S)
            min_id = f"{int((time.time() - ABORT_MARKER_TTL_S) * 1000)}-0"
            pipe.xadd(
                self.keys.aborts(),
                {FIELD: protocol.encode(protocol.AbortRequest(request_id=request_id))},
                minid=min_id,
                approximate=True,
            )
            await pipe.execute()

    async def live_engines(self, model: str | None = None) -> list[EngineStatus]:
        """Status records of every engine whose status key has not expired."""
        return await self.capacity.live_engines(model)

    async def is_model_ready(self, model: str) -> bool:
        return any(not s.draining for s in await self.live_engines(model))

    async def close(self) -> None:
        if self._background:
            await asyncio.wait(self._background, timeout=5)
        self.silence.close()
        await self.capacity.aclose()
        await self.outputs.close()
        await self.redis.aclose()

    # ------------------------------------------------------------------ internals

    def _texts_for(self, tokenizer: Decoder) -> TokenTexts:
        texts = self._token_texts.get(id(tokenizer))
        if texts is None or texts.tokenizer is not tokenizer:
            texts = self._token_texts[id(tokenizer)] = TokenTexts(tokenizer)
        return texts

    async def _next_delta(
        self, queue: DeltaQueue, model: str, request_id: str
    ) -> protocol.RequestDelta:
        waited = 0
        while True:
            raise_if_cancelled()  # dropped by redis-py as this request was sent or resumed
            delta = await self.silence.next(queue)
            if delta is not SILENT:
                return delta
            waited += 1
            # Engines are alive: it waits behind others or was preempted. Resuming it now
            # would only redo its work on the same busy engine.
            if waited < QUEUED_PATIENCE and await self.live_engines(model):
                continue
            raise EngineTimeout(
                f"the engine for model {model!r} sent nothing for request {request_id} "
                f"in {self.silence_timeout * waited:.0f}s"
            )

    def abort_soon(self, request_id: str) -> None:
        """``abort`` in a task of its own: the caller may be mid-cancellation, and the abort
        must still reach Redis."""
        task = asyncio.get_running_loop().create_task(self._abort_quietly(request_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _abort_quietly(self, request_id: str) -> None:
        try:
            await self.abort(request_id)
        except Exception as exc:
            warn_failure(logger, exc, "could not send abort for %s", request_id)
