"""The async client API processes use to run generations on engines over Redis.

One client per process (per event loop): it submits GenerateRequests to a model's request
stream, and a single reader task reads this frontend's output stream and fans each delta out
to the queue of the request it belongs to. Detokenization, stop strings and usage counting
happen here, per sample, so engines see token ids only. Imports nothing from engine/ but the
protocol module, so API processes never load torch.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import redis.asyncio as aioredis

from engine import protocol
from engine.protocol import FIELD, EngineStatus, Keys, SamplingOptions
from engine.text.detokenizer import IncrementalDetokenizer
from engine.text.stop_strings import StopStringMatcher

logger = logging.getLogger(__name__)

__all__ = [
    "EngineClient",
    "EngineError",
    "EngineOverloaded",
    "EngineTimeout",
    "EngineUnavailable",
    "GenerationChunk",
    "SamplingOptions",
    "TokenLogprob",
]

# An abort marker outlives any request that could still be sitting in a stream.
ABORT_MARKER_TTL_S = 600
# Live-engine snapshots used for admission are reused this long: 64 requests arriving at
# once cost one Redis round trip, not 64.
ADMISSION_CACHE_S = 0.25
# A request that has produced nothing yet may wait behind others this many silence timeouts
# while live engines exist; a started request that goes silent fails after one.
QUEUED_PATIENCE = 10
# How long the output reader blocks in one XREAD.
READ_BLOCK_MS = 250


class EngineUnavailable(Exception):
    """No live engine serves this model (the API answers 503)."""


class EngineOverloaded(Exception):
    """Too much work is waiting for this model; retry after ``retry_after`` seconds (503)."""

    def __init__(self, message: str, *, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class EngineError(Exception):
    """The engine failed or died while running the request (a stream error event)."""


class EngineTimeout(EngineError):
    """The engine stayed silent longer than ENGINE_SILENCE_TIMEOUT."""


@dataclass(slots=True)
class TokenLogprob:
    """A token's logprob and its top alternatives as (token_id, text, logprob)."""

    token_id: int
    token: str
    logprob: float
    top: list[tuple[int, str, float]] = field(default_factory=list)


@dataclass(slots=True)
class GenerationChunk:
    """New output for one sample: text and tokens since the previous chunk of that index."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None
    finish_reason: str | None
    stop_reason: int | str | None
    prompt_tokens: int
    completion_tokens: int  # cumulative for this index
    cached_tokens: int
    prompt_logprobs: list[TokenLogprob | None] | None = None
    # Engine-side intervals, on the final chunk of a sample (None when the engine sent none).
    queue_time: float | None = None
    prefill_time: float | None = None
    decode_time: float | None = None


class _TokenTexts:
    """Token id -> text for logprobs, cached: the same few thousand ids recur constantly."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self._tokenizer.decode([token_id], skip_special_tokens=False)
            self._cache[token_id] = text
        return text

    def logprob(self, lp: protocol.TokenLogprob) -> TokenLogprob:
        top = [(t, self(t), v) for t, v in zip(lp.top_ids, lp.top_logprobs, strict=False)]
        return TokenLogprob(lp.token_id, self(lp.token_id), lp.logprob, top)


class _Sample:
    """One sample's detokenizer, stop-string matcher and token count."""

    def __init__(self, index: int, request: _RequestState):
        self.index = index
        self.request = request
        self.detok = IncrementalDetokenizer(
            request.tokenizer, request.prompt_token_ids, skip_special_tokens=request.skip_special
        )
        self.matcher = StopStringMatcher(request.stop, include_stop_str_in_output=request.include)
        self.num_tokens = 0
        self.finished = False

    def apply(self, delta: protocol.RequestDelta) -> GenerationChunk | None:
        if self.finished:
            return None
        req = self.request
        token_ids: list[int] = []
        texts: list[str] = []
        logprobs: list[TokenLogprob] | None = [] if delta.logprobs is not None else None
        finish_reason, stop_reason = None, None
        for j, token_id in enumerate(delta.new_token_ids):
            self.num_tokens += 1
            token_ids.append(token_id)
            if logprobs is not None and j < len(delta.logprobs):
                logprobs.append(req.token_texts.logprob(delta.logprobs[j]))
            piece = self.detok.push(token_id)
            # As vLLM does: no stop string can end generation before min_tokens.
            texts.append(self.matcher.feed(piece) if self.num_tokens > req.min_tokens else piece)
            if self.matcher.matched is not None:
                finish_reason, stop_reason = "stop", self.matcher.matched
                break
        if finish_reason is None and delta.finish_reason is not None:
            texts.append(self.matcher.feed(self.detok.flush()))
            if self.matcher.matched is not None:
                finish_reason, stop_reason = "stop", self.matcher.matched
            else:
                texts.append(self.matcher.flush())
                finish_reason, stop_reason = delta.finish_reason, delta.stop_reason
        req.num_prompt_tokens = delta.num_prompt_tokens or req.num_prompt_tokens
        req.num_cached_tokens = max(req.num_cached_tokens, delta.num_cached_tokens)
        self.finished = finish_reason is not None
        prompt_logprobs = None
        if delta.prompt_logprobs is not None:
            prompt_logprobs = [
                None if lp is None else req.token_texts.logprob(lp) for lp in delta.prompt_logprobs
            ]
        return GenerationChunk(
            index=self.index,
            text="".join(texts),
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=finish_reason,
            stop_reason=stop_reason,
            prompt_tokens=req.num_prompt_tokens,
            completion_tokens=self.num_tokens,
            cached_tokens=req.num_cached_tokens,
            prompt_logprobs=prompt_logprobs,
            queue_time=delta.queue_time,
            prefill_time=delta.prefill_time,
            decode_time=delta.decode_time,
        )


@dataclass(slots=True)
class _RequestState:
    tokenizer: Any
    prompt_token_ids: list[int]
    stop: list[str] | None
    include: bool
    skip_special: bool
    min_tokens: int
    token_texts: _TokenTexts
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0


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
    ):
        # redis-py's asyncio pool raises once its 100 connections are busy; a blocking pool
        # makes a burst of requests wait their turn instead (the URL's max_connections wins).
        self.redis = aioredis.Redis(
            connection_pool=aioredis.BlockingConnectionPool.from_url(
                redis_url, max_connections=512, timeout=10
            )
        )
        # The reader's blocking XREAD gets a connection of its own, never one commands wait for.
        self._reader_redis = aioredis.Redis.from_url(redis_url, max_connections=2)
        self.keys = Keys(prefix)
        self.silence_timeout = silence_timeout
        self.max_waiting = max_waiting
        self.frontend_id = frontend_id or protocol.new_frontend_id()
        self._queues: dict[str, asyncio.Queue[protocol.RequestDelta]] = {}
        self._reader: asyncio.Task | None = None
        self._closing = False
        self._admission: dict[str, tuple[float, list[EngineStatus], int]] = {}
        self._admission_locks: dict[str, asyncio.Lock] = {}
        self._background: set[asyncio.Task] = set()
        self._token_texts: dict[int, _TokenTexts] = {}

    @classmethod
    def for_process(cls) -> EngineClient:
        """The client of this process and event loop, configured from Django settings."""
        from django.conf import settings

        try:
            loop: Any = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        key = id(loop)
        entry = cls._instances.get(key)
        if entry is None or entry[0] is not loop:
            client = cls(
                settings.REDIS_URL,
                prefix=settings.PLATFORM_REDIS_PREFIX,
                silence_timeout=float(settings.ENGINE_SILENCE_TIMEOUT),
                max_waiting=int(settings.ENGINE_MAX_WAITING),
            )
            cls._instances[key] = (loop, client)
            return client
        return entry[1]

    # ------------------------------------------------------------------ public API

    async def generate(
        self,
        *,
        model: str,
        prompt_token_ids: list[int],
        sampling: SamplingOptions,
        tokenizer: Any,
        request_id: str | None = None,
        cache_salt: str = "",
        tenant: str = "",
        adapter: Any = None,  # a name, or a route with name, checksum and path
        stop: list[str] | None = None,
        include_stop_str_in_output: bool = False,
        skip_special_tokens: bool = True,
        priority: int = 0,
    ) -> AsyncIterator[GenerationChunk]:
        """Run one generation; yields chunks until every sample has finished.

        Closing the iterator early (aclose, cancellation, a client disconnect) aborts the
        request in the engine.
        """
        if not prompt_token_ids or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt_token_ids
        ):
            raise ValueError("prompt_token_ids must be a non-empty list of token ids")
        request_id = request_id or uuid.uuid4().hex
        if request_id in self._queues:
            raise ValueError(f"request id {request_id!r} is already in flight")
        await self._admit(model)
        request = protocol.GenerateRequest(
            request_id=request_id,
            frontend_id=self.frontend_id,
            prompt_token_ids=list(prompt_token_ids),
            sampling=sampling,
            adapter=_adapter_ref(adapter),
            cache_salt=cache_salt,
            tenant=tenant,
            arrival_time=time.time(),
            priority=priority,
        )
        state = _RequestState(
            tokenizer=tokenizer,
            prompt_token_ids=request.prompt_token_ids,
            stop=stop,
            include=include_stop_str_in_output,
            skip_special=skip_special_tokens,
            min_tokens=sampling.min_tokens,
            token_texts=self._texts_for(tokenizer),
            num_prompt_tokens=len(prompt_token_ids),
        )
        samples = [_Sample(i, state) for i in range(sampling.n)]
        queue: asyncio.Queue[protocol.RequestDelta] = asyncio.Queue()
        self._queues[request_id] = queue
        self._ensure_reader()
        engine_finished: set[int] = set()
        try:
            await self.redis.xadd(self.keys.requests(model), {FIELD: protocol.encode(request)})
            num_open = len(samples)
            got_output = False
            while num_open:
                delta = await self._next_delta(queue, model, request_id, got_output)
                got_output = True
                if delta.error:
                    engine_finished.update(range(len(samples)))
                    raise EngineError(delta.error)
                if not 0 <= delta.index < len(samples):
                    logger.warning("delta for %s has bad index %d", request_id, delta.index)
                    continue
                if delta.finish_reason is not None:
                    engine_finished.add(delta.index)
                chunk = samples[delta.index].apply(delta)
                if chunk is None:
                    continue
                if chunk.finish_reason is not None:
                    num_open -= 1
                yield chunk
        finally:
            self._queues.pop(request_id, None)
            if len(engine_finished) < len(samples):
                self._abort_in_background(request_id)

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
        members = [m.decode() for m in await self.redis.smembers(self.keys.engines())]
        pairs = [protocol.split_engine_member(m) for m in sorted(members)]
        if model is not None:
            pairs = [(m, e) for m, e in pairs if m == model]
        if not pairs:
            return []
        raw = await self.redis.mget([self.keys.status(m, e) for m, e in pairs])
        statuses = []
        for data in raw:
            if data is None:
                continue
            try:
                statuses.append(protocol.decode_status(data))
            except Exception:
                logger.warning("unreadable engine status record skipped", exc_info=True)
        return statuses

    async def is_model_ready(self, model: str) -> bool:
        return any(not s.draining for s in await self.live_engines(model))

    async def publish_adapter(self, *, model: str, name: str, path: str, checksum: str) -> None:
        """Make a LoRA adapter servable by every engine of ``model``, now and after restarts."""
        ref = protocol.AdapterRef(name=name, checksum=checksum, path=path)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.adapters(model), name, protocol.encode(ref))
            pipe.xadd(
                self.keys.control(model),
                {FIELD: protocol.encode(protocol.LoadAdapter(adapter=ref))},
            )
            await pipe.execute()

    async def withdraw_adapter(self, *, model: str, name: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(self.keys.adapters(model), name)
            pipe.xadd(
                self.keys.control(model),
                {FIELD: protocol.encode(protocol.UnloadAdapter(name=name))},
            )
            await pipe.execute()

    async def drain(self, *, model: str, engine_id: str = "") -> None:
        """Ask one engine (or, with no id, every engine) of ``model`` to drain and exit."""
        message = protocol.Drain(engine_id=engine_id)
        await self.redis.xadd(self.keys.control(model), {FIELD: protocol.encode(message)})

    async def close(self) -> None:
        if self._background:
            await asyncio.wait(self._background, timeout=5)
        if self._reader is not None:
            # redis-py lets a blocked XREAD outlive its cancellation; the reader checks this
            # flag between reads instead, so it ends within one READ_BLOCK_MS.
            self._closing = True
            await asyncio.wait({self._reader}, timeout=READ_BLOCK_MS / 1000 + 1)
            if not self._reader.done():
                self._reader.cancel()
            self._reader = None
        await self._reader_redis.aclose()
        await self.redis.aclose()

    # ------------------------------------------------------------------ internals

    def _texts_for(self, tokenizer: Any) -> _TokenTexts:
        texts = self._token_texts.get(id(tokenizer))
        if texts is None or texts._tokenizer is not tokenizer:
            texts = self._token_texts[id(tokenizer)] = _TokenTexts(tokenizer)
        return texts

    async def _admit(self, model: str) -> None:
        cached = self._admission.get(model)
        if cached is None or time.monotonic() - cached[0] > ADMISSION_CACHE_S:
            # One refresh for a burst: the others wait for it instead of each asking Redis.
            lock = self._admission_locks.setdefault(model, asyncio.Lock())
            async with lock:
                cached = self._admission.get(model)
                if cached is None or time.monotonic() - cached[0] > ADMISSION_CACHE_S:
                    statuses = [s for s in await self.live_engines(model) if not s.draining]
                    lag = await self._stream_lag(model) if statuses else 0
                    cached = (time.monotonic(), statuses, lag)
                    self._admission[model] = cached
        _, statuses, lag = cached
        if not statuses:
            raise EngineUnavailable(f"no engine is serving model {model!r} right now")
        waiting = lag + sum(s.num_waiting for s in statuses)
        if waiting >= self.max_waiting:
            # Time for the engines to start the excess, at their current request rate.
            capacity = max(1, sum(max(s.max_num_seqs, 1) for s in statuses))
            retry_after = min(60.0, max(1.0, (waiting - self.max_waiting + 1) / capacity))
            raise EngineOverloaded(
                f"{waiting} requests are waiting for model {model!r} "
                f"(limit {self.max_waiting}); retry later",
                retry_after=round(retry_after, 1),
            )

    async def _stream_lag(self, model: str) -> int:
        """Entries in the request stream no engine has read yet."""
        try:
            groups = await self.redis.xinfo_groups(self.keys.requests(model))
        except aioredis.ResponseError:  # no stream yet
            return 0
        for group in groups:
            name = group.get("name")
            if name in (protocol.ENGINE_GROUP, protocol.ENGINE_GROUP.encode()):
                lag = group.get("lag")
                return int(lag) if lag is not None else 0
        return 0

    async def _next_delta(
        self, queue: asyncio.Queue, model: str, request_id: str, got_output: bool
    ) -> protocol.RequestDelta:
        waited = 0
        while True:
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                # cancellation that arrives as the queue delivers, and then no abort is sent.
                async with asyncio.timeout(self.silence_timeout):
                    return await queue.get()
            except TimeoutError:
                waited += 1
                # Not started yet and engines are alive: it is queued behind others.
                if not got_output and waited < QUEUED_PATIENCE and await self.live_engines(model):
                    continue
                raise EngineTimeout(
                    f"the engine for model {model!r} sent nothing for request {request_id} "
                    f"in {self.silence_timeout * waited:.0f}s"
                ) from None

    def _abort_in_background(self, request_id: str) -> None:
        # The caller may be mid-cancellation; the abort must still reach Redis.
        task = asyncio.get_running_loop().create_task(self._abort_quietly(request_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _abort_quietly(self, request_id: str) -> None:
        try:
            await self.abort(request_id)
        except Exception:
            logger.warning("could not send abort for %s", request_id, exc_info=True)

    def _ensure_reader(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(
                self._read_outputs(), name=f"engine-outputs-{self.frontend_id}"
            )

    async def _read_outputs(self) -> None:
        """The one reader of this frontend's output stream; trims what it has read."""
        key = self.keys.outputs(self.frontend_id)
        last_id = b"0-0"
        while not self._closing:
            try:
                response = await self._reader_redis.xread(
                    {key: last_id}, count=512, block=READ_BLOCK_MS
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("reading %s failed; retrying", key, exc_info=True)
                await asyncio.sleep(0.5)
                continue
            if not response:
                continue
            for _stream, entries in response:
                for entry_id, fields in entries:
                    last_id = entry_id
                    self._dispatch(fields.get(FIELD))
            try:
                await self.redis.xtrim(key, minid=_next_stream_id(last_id))
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.debug("trim of %s failed", key, exc_info=True)

    def _dispatch(self, data: bytes | None) -> None:
        if data is None:
            logger.warning("output entry without %r field ignored", FIELD)
            return
        try:
            batch = protocol.decode_outputs(data)
        except Exception:
            logger.warning("unreadable output entry ignored", exc_info=True)
            return
        for delta in batch.deltas:
            queue = self._queues.get(delta.request_id)
            if queue is not None:
                queue.put_nowait(delta)


def _next_stream_id(entry_id: bytes | str) -> str:
    """The smallest stream id after ``entry_id``: XTRIM MINID keeps ids >= it."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def _adapter_ref(adapter: Any) -> protocol.AdapterRef | None:
    """A name, or a route with name, checksum and path (what the engine loads on first use)."""
    if not adapter:
        return None
    if isinstance(adapter, str):
        return protocol.AdapterRef(name=adapter)
    return protocol.AdapterRef(name=adapter.name, checksum=adapter.checksum, path=adapter.path)
