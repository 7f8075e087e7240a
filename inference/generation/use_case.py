"""The one generation use case, for HTTP (SSE or JSON) and the WebSocket alike.

    generation = await Generation.admit(prepare_chat, principal, body)  # plan + admit (or raise)
    await generation.open()          # engine request(s) sent, first output awaited
    async for event in generation.events(): ...   # or: await generation.response()

However it ends (done, error, client gone, cancelled), the generation is settled exactly once:
limits released, usage queued and metrics recorded, with the prompt tokens it was planned with,
or none when no engine took it (no engine, overloaded, none answered in time): never billed.
Settlement runs shielded from cancellation: SDKs close the connection right after
``data: [DONE]``, which cancels the request task, and the reservation must still be released
and the request still counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from controlplane.access.admission import Admission, finish
from controlplane.access.principals import Principal
from controlplane.metrics import record_request
from engine.text.tokenizer import ChatTokenizer
from inference.errors import error_from_exception
from inference.formatters import collect_response, formatter_for, stream_events
from inference.formatters.base import EngineItem
from inference.generation.engine_stream import engine_chunks
from inference.generation.plan import GenerationPlan, GenerationStats
from inference.limits import admit
from inference.transport import EngineClient, EngineOverloaded, EngineTimeout, EngineUnavailable

# What each caller picks: prepare_chat, prepare_completion (planning.py) or the Responses API's
# prepare_response; validates a raw body and plans it, or raises ApiError.
Planner = Callable[[Principal, dict[str, Any]], Awaitable[tuple[GenerationPlan, ChatTokenizer]]]


# What ``open`` raises when no engine took the request (before its first output).
_NEVER_REACHED_ENGINE = (EngineUnavailable, EngineOverloaded, EngineTimeout)


def _status_of(exc: BaseException) -> int:
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return 499  # the client went away (or cancelled); closing the stream aborted the engine
    return error_from_exception(exc).status


async def _prefetched(items: AsyncIterator[EngineItem]) -> AsyncIterator[EngineItem]:
    """Wait for the engine's first output before answering, so that a refusal (no engine,
    queue full) is still an HTTP status and not an event inside a 200 stream."""
    try:
        first = await anext(items)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await items.aclose()
        raise

    async def rest():
        try:
            if first is not None:
                yield first
                async for item in items:
                    yield item
        finally:
            await items.aclose()

    return rest()


def _finished_reason(stats: GenerationStats, status: int) -> str:
    if stats.finish_reason:
        return stats.finish_reason
    return "abort" if status == 499 else "error"


async def _settle(
    admission: Admission, plan: GenerationPlan, stats: GenerationStats, *, status: int
) -> None:
    latency = time.monotonic() - stats.started
    # A request no engine took costs nothing and counts no prompt tokens in the metrics; it
    # is still counted as a finished (refused) request.
    prompt_tokens = 0 if stats.never_reached_engine else plan.prompt_tokens
    await finish(
        admission,
        prompt_tokens=prompt_tokens,
        completion_tokens=stats.num_completion_tokens,
        cached_tokens=stats.num_cached_tokens,
        status=status,
        finish_reason=stats.finish_reason,
        time_to_first_token=stats.time_to_first_token,
        latency=latency,
        adapter=plan.adapter.name if plan.adapter is not None else None,
        object_id=plan.request_id,
        end_user=plan.end_user,
    )
    await record_request(
        model=plan.model,
        tenant=plan.tenant,
        finished_reason=_finished_reason(stats, status),
        prompt_tokens=prompt_tokens,
        generation_tokens=stats.num_completion_tokens,
        e2e_latency=latency,
        time_to_first_token=stats.time_to_first_token,
        inter_token_latencies=stats.inter_token_latencies,
        queue_time=stats.queue_time,
        prefill_time=stats.prefill_time,
        decode_time=stats.decode_time,
        cached_tokens=stats.num_cached_tokens,
    )


async def settle_generation(
    admission: Admission, plan: GenerationPlan, stats: GenerationStats, *, status: int
) -> None:
    await asyncio.shield(asyncio.ensure_future(_settle(admission, plan, stats, status=status)))


class Generation:
    """One admitted chat or text completion, from the engine stream to its settlement."""

    def __init__(
        self,
        plan: GenerationPlan,
        tokenizer: ChatTokenizer,
        admission: Admission,
        *,
        started: float,
    ):
        self.plan = plan
        self.tokenizer = tokenizer
        self.admission = admission
        self.stats = GenerationStats(
            started=started,
            observes_token_gaps=not plan.reads_outputs_whole,
            counts_completion=not plan.echo_only,
        )
        self.formatter = formatter_for(plan, self.stats)
        self._items: AsyncIterator[EngineItem] | None = None
        self._settled = False
        self._done = asyncio.Event()

    @classmethod
    async def admit(
        cls,
        planner: Planner,
        principal: Principal,
        body: dict[str, Any],
        *,
        started: float | None = None,
    ) -> Generation:
        """Validate and plan ``body`` with ``planner``, then reserve it under the tenant's limits.

        Raises ApiError (bad input, unknown model) or AccessError (429) with nothing reserved.
        """
        started = time.monotonic() if started is None else started
        plan, tokenizer = await planner(principal, body)
        admission = await admit(
            principal,
            model=plan.model,
            prompt_tokens=plan.prompt_tokens,
            max_tokens=plan.sampling.max_tokens * plan.num_choices,
            end_user=plan.end_user,
            end_user_param=plan.end_user_param,
        )
        return cls(plan, tokenizer, admission, started=started)

    @property
    def headers(self) -> dict[str, str]:
        """The x-ratelimit-* headers of the admission, for the response."""
        return dict(self.admission.headers)

    async def open(self, client: EngineClient | None = None) -> None:
        """Send the engine request(s) and wait for the first output; a refusal settles the
        generation with its status and raises."""
        client = client or EngineClient.for_process()
        try:
            self._items = await _prefetched(engine_chunks(client, self.plan, self.tokenizer))
        except BaseException as exc:
            # Refused by the capacity check (nothing sent), or sent and no engine answered
            # before the silence timeout: no engine worked on it.
            self.stats.never_reached_engine = isinstance(exc, _NEVER_REACHED_ENGINE)
            await self.settle(_status_of(exc))
            raise

    def events(self) -> GenerationEvents:
        """OpenAI stream chunks until every choice has finished (see GenerationEvents)."""
        return GenerationEvents(self)

    async def _stream(self) -> AsyncIterator[dict]:
        status = 200
        try:
            async for event in stream_events(self.formatter, self._opened()):
                yield event
        except BaseException as exc:
            status = _status_of(exc)
            raise
        finally:
            await self._close(status)

    async def response(self) -> dict[str, Any]:
        """The whole OpenAI response object."""
        status = 200
        try:
            return await collect_response(self.formatter, self._opened())
        except BaseException as exc:
            status = _status_of(exc)
            raise
        finally:
            await self._close(status)

    async def settle(self, status: int) -> None:
        """Release the reservation, queue usage and record metrics: exactly once."""
        if self._settled:
            return
        self._settled = True
        try:
            await settle_generation(self.admission, self.plan, self.stats, status=status)
        finally:
            self._done.set()

    async def wait_settled(self) -> None:
        await self._done.wait()

    def _opened(self) -> AsyncIterator[EngineItem]:
        if self._items is None:
            raise RuntimeError("Generation.open() must be awaited before reading its output")
        return self._items

    async def _close(self, status: int) -> None:
        try:
            if self._items is not None:
                await self._items.aclose()
        finally:
            await self.settle(status)


class GenerationEvents:
    """A generation's stream chunks, as an async iterator that settles however it ends.

    Closed before its first chunk, an async generator never runs its ``finally``; this one
    settles then too (499). Django closes a streaming response's content through a sync
    ``close`` when the response ends, also when the client left while the response start was
    being sent and the body was never read: ``close`` settles a stream never started.
    """

    def __init__(self, generation: Generation):
        self._generation = generation
        self._stream: AsyncIterator[dict] | None = None
        self._loop = asyncio.get_running_loop()
        self._closing: asyncio.Task | None = None

    def __aiter__(self) -> GenerationEvents:
        return self

    async def __anext__(self) -> dict:
        if self._stream is None:
            self._stream = self._generation._stream()
        return await self._stream.__anext__()

    async def aclose(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
        else:
            await self._generation._close(499)

    def close(self) -> None:
        """For Django, from any thread: settle the generation if its stream never started
        (a started one settles when its iteration is closed)."""
        if self._stream is None:
            self._loop.call_soon_threadsafe(self._close_soon)

    def _close_soon(self) -> None:
        if self._stream is None and self._closing is None:
            self._closing = self._loop.create_task(self.aclose())
