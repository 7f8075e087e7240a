"""/v1/chat/completions and /v1/completions: plan, admit, run, then stream SSE or collect."""

from __future__ import annotations

from collections.abc import AsyncIterator

from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema

from inference.errors import error_from_exception
from inference.generation import (
    GenerationPlan,
    GenerationStats,
    collect_response,
    engine_chunks,
    stream_chunks,
)
from inference.planning import Kind, prepare_generation
from inference.schemas.chat import ChatCompletionRequestSerializer
from inference.schemas.completions import CompletionRequestSerializer
from inference.settlement import settle_generation
from inference.sse import sse_stream
from inference.views.base import AsyncApiView, json_response


async def prefetched(chunks: AsyncIterator) -> AsyncIterator:
    """Wait for the engine's first output before answering, so that a refusal (no engine,
    queue full) is still an HTTP status and not an event inside a 200 stream."""
    try:
        first = await anext(chunks)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await chunks.aclose()
        raise

    async def rest():
        try:
            if first is not None:
                yield first
                async for item in chunks:
                    yield item
        finally:
            await chunks.aclose()

    return rest()


class GenerationView(AsyncApiView):
    kind: Kind

    async def post(self, request):
        from inference.engine_client import EngineClient

        principal = await self.authenticate()
        body, plan, tokenizer = await prepare_generation(self.kind, principal, self.json_body())
        await self.admit(
            principal,
            model=plan.model,
            prompt_tokens=plan.prompt_tokens,
            max_tokens=plan.sampling.max_tokens * plan.num_choices,
        )
        stats = GenerationStats()
        chunks = await prefetched(engine_chunks(EngineClient.for_process(), plan, tokenizer))
        if not body.get("stream"):
            try:
                payload = await collect_response(chunks, plan, stats)
            finally:
                await chunks.aclose()
            await self._finish(plan, stats, status=200)
            return json_response(payload)
        response = StreamingHttpResponse(
            self._stream(plan, stats, chunks), content_type="text/event-stream"
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # proxies must pass tokens on as they come
        return response

    async def _stream(self, plan: GenerationPlan, stats: GenerationStats, chunks):
        status = 200
        try:
            async for event in sse_stream(
                stream_chunks(chunks, plan, stats),
                on_error=lambda exc: error_from_exception(exc).body(),
            ):
                yield event
        except BaseException:
            status = 499  # the client went away; closing `chunks` aborts the engine request
            raise
        finally:
            await chunks.aclose()
            await self._finish(plan, stats, status=status)

    async def _finish(self, plan: GenerationPlan, stats: GenerationStats, *, status: int):
        if self.admission is None or self._finished:
            return
        self._finished = True
        await settle_generation(self.admission, plan, stats, status=status, started=self.started)


class ChatCompletionsView(GenerationView):
    """Chat completion for a list of messages, rendered with the model's chat template."""

    endpoint = "chat.completions"
    kind = "chat"

    @extend_schema(
        operation_id="createChatCompletion",
        request=ChatCompletionRequestSerializer,
        responses={200: OpenApiResponse(description="chat.completion, or SSE chunks if stream")},
        tags=["OpenAI"],
    )
    async def post(self, request):
        return await super().post(request)


class CompletionsView(GenerationView):
    """Text completion of one or more prompts (text or token ids)."""

    endpoint = "completions"
    kind = "completion"

    @extend_schema(
        operation_id="createCompletion",
        request=CompletionRequestSerializer,
        responses={200: OpenApiResponse(description="text_completion, or SSE chunks if stream")},
        tags=["OpenAI"],
    )
    async def post(self, request):
        return await super().post(request)
