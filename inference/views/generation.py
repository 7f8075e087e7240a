"""/v1/chat/completions and /v1/completions: the generation use case, as SSE or one JSON body."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema

from inference.chat_store.views import StoredCompletionListing
from inference.errors import error_from_exception
from inference.generation.planning import prepare_chat, prepare_completion
from inference.generation.use_case import Generation, Planner
from inference.schemas.chat import ChatCompletionRequestSerializer
from inference.schemas.completions import CompletionRequestSerializer
from inference.sse import SseBody
from inference.stored_answers import generation_events, whole_answer
from inference.views.base import AsyncApiView, event_stream, json_response


class GenerationView(AsyncApiView):
    planner: Planner

    async def post(self, request):
        principal = await self.authenticate()
        generation = await Generation.admit(
            type(self).planner, principal, self.json_body(), started=self.started
        )
        self.response_headers = generation.headers  # on errors from here on too
        await generation.open()
        if not generation.plan.stream:
            return json_response(await whole_answer(generation))
        return event_stream(self.stream_body(generation))

    def stream_body(self, generation: Generation) -> SseBody:
        """OpenAI's chunks, ``data: [DONE]`` at the end, an error as one more chunk."""
        events = generation_events(generation)  # a chat completion stored if it asked
        return SseBody(events, on_error=lambda exc: error_from_exception(exc).body())


class ChatCompletionsView(StoredCompletionListing, GenerationView):
    """Chat completion for a list of messages, rendered with the model's chat template (POST);
    the tenant's stored completions (GET)."""

    endpoint = "chat.completions"
    planner = prepare_chat

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
    planner = prepare_completion

    @extend_schema(
        operation_id="createCompletion",
        request=CompletionRequestSerializer,
        responses={200: OpenApiResponse(description="text_completion, or SSE chunks if stream")},
        tags=["OpenAI"],
    )
    async def post(self, request):
        return await super().post(request)
