"""POST /tokenize and /detokenize (vLLM's extension): the server's view of a prompt."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema

from inference.catalog import embedding_tokenizer_for, resolve_model, tokenizer_for
from inference.errors import invalid_request
from inference.generation.off_loop import off_loop
from inference.generation.planning import render_chat_prompt
from inference.generation.prompt_limits import (
    chat_text_length,
    check_token_ids,
    refuse_text_too_long,
)
from inference.schemas.tokenize import DetokenizeRequestSerializer, TokenizeRequestSerializer
from inference.schemas.validation import validate_body
from inference.views.base import AsyncApiView, json_response


class TokenizeView(AsyncApiView):
    """Token ids of a prompt, or of messages rendered with the chat template."""

    endpoint = "tokenize"

    @extend_schema(
        operation_id="tokenize",
        request=TokenizeRequestSerializer,
        responses={200: OpenApiResponse(description="{count, max_model_len, tokens}")},
        tags=["vLLM extensions"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        body = validate_body(TokenizeRequestSerializer, self.json_body())
        entry = await resolve_model(principal, body["model"])
        if entry.is_embedding:
            if "messages" in body:
                raise invalid_request(
                    "Embedding models take a prompt, not messages.", param="messages"
                )
            tokens = await off_loop(embedding_tokenizer_for(entry).encode, body["prompt"])
            return json_response(
                {"count": len(tokens), "max_model_len": entry.max_model_len, "tokens": tokens}
            )
        # A prompt that cannot fit the context is not worth the tokenizer's time.
        length = chat_text_length(body["messages"]) if "messages" in body else len(body["prompt"])
        param = "messages" if "messages" in body else "prompt"
        refuse_text_too_long(length, max_model_len=entry.max_model_len, param=param)
        tokenizer = await tokenizer_for(entry)
        if "messages" in body:
            _text, tokens = await off_loop(render_chat_prompt, tokenizer, body)
        else:
            tokens = await off_loop(
                tokenizer.encode, body["prompt"], add_special_tokens=body["add_special_tokens"]
            )
        return json_response(
            {"count": len(tokens), "max_model_len": entry.max_model_len, "tokens": tokens}
        )


class DetokenizeView(AsyncApiView):
    """Text of a list of token ids."""

    endpoint = "detokenize"

    @extend_schema(
        operation_id="detokenize",
        request=DetokenizeRequestSerializer,
        responses={200: OpenApiResponse(description="{prompt}")},
        tags=["vLLM extensions"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        body = validate_body(DetokenizeRequestSerializer, self.json_body())
        entry = await resolve_model(principal, body["model"])
        tokenizer = await tokenizer_for(entry)
        check_token_ids(tokenizer, body["tokens"], param="tokens")
        text = await off_loop(tokenizer.decode, body["tokens"], skip_special_tokens=False)
        return json_response({"prompt": text})
