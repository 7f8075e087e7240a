"""/v1/messages and /v1/messages/count_tokens: Anthropic's Messages API on the generation use
case, with Anthropic's key header, typed SSE events and error bodies."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema

from inference import credentials
from inference.errors import error_from_exception, error_response
from inference.generation.use_case import Generation
from inference.messages import schema
from inference.messages.errors import anthropic_error
from inference.messages.planning import count_message_tokens, prepare_messages
from inference.messages.serializers import CountTokensRequestSerializer, MessagesRequestSerializer
from inference.sse import TypedEventsBody
from inference.views.base import AsyncApiView, json_response
from inference.views.generation import GenerationView

HEADERS = [
    OpenApiParameter(
        "x-api-key",
        str,
        OpenApiParameter.HEADER,
        description="Your API key (or send 'Authorization: Bearer <key>').",
    ),
    OpenApiParameter(
        "anthropic-version", str, OpenApiParameter.HEADER, description="Accepted; any version."
    ),
]


class AnthropicRoute(AsyncApiView):
    """Anthropic's conventions: the key in ``x-api-key``, errors in Anthropic's shape."""

    endpoint = "messages"

    async def authenticate(self):
        headers = self.request.headers
        return await credentials.authenticate_x_api_key(
            headers.get("x-api-key"), headers.get("Authorization"), endpoint=self.endpoint
        )

    def error_response(self, error, headers=None):
        return error_response(error, headers, body=anthropic_error(error))


class MessagesView(AnthropicRoute, GenerationView):
    """Create a message: text, system, tools (tool_use / tool_result), stop sequences."""

    planner = prepare_messages

    @extend_schema(
        operation_id="createMessage",
        request=MessagesRequestSerializer,
        parameters=HEADERS,
        responses={200: schema.CREATED, **schema.ERRORS},
        tags=["Anthropic"],
    )
    async def post(self, request):
        return await super().post(request)

    def stream_body(self, generation: Generation) -> TypedEventsBody:
        """Anthropic's events (``event: <type>``), an ``error`` event if it fails midway."""
        return TypedEventsBody(
            generation.events(), on_error=lambda exc: anthropic_error(error_from_exception(exc))
        )


class CountTokensView(AnthropicRoute):
    """The input tokens a message request's prompt (messages, system, tools) comes to."""

    @extend_schema(
        operation_id="countMessageTokens",
        request=CountTokensRequestSerializer,
        parameters=HEADERS,
        responses={200: schema.COUNTED, **schema.ERRORS},
        tags=["Anthropic"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        count = await count_message_tokens(principal, self.json_body())
        return json_response({"input_tokens": count})
