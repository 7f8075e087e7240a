"""The WebSocket endpoint (/v1/ws): many generations multiplexed on one connection.

The client sends chat, completion or Responses bodies, each with its own id; every generation
streams the same chunk objects (Responses: typed events) as SSE, tagged with that id, and can
be cancelled by id (which aborts it in the engine). The credential is checked again before every message's work (for that
message's scope, as over HTTP) and every WEBSOCKET_AUTH_RECHECK_SECONDS: once a key is revoked
or a staff user loses the playground, the session ends (generations aborted, an error, a
close). docs/websocket.md is the protocol's reference.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from controlplane.access.principals import AccessError, Principal
from controlplane.common.outages import DATA_OUTAGE_ERRORS
from engine.redis_outage import OutageLog
from inference import credentials
from inference.catalog import visible_models
from inference.errors import ApiError, error_from_exception, invalid_request
from inference.generation.planning import prepare_chat, prepare_completion
from inference.generation.use_case import Generation, Planner
from inference.messages.errors import anthropic_error
from inference.messages.planning import prepare_messages
from inference.responses.planning import prepare_response
from inference.schemas.validation import parse_json_body
from inference.stored_answers import generation_events

logger = logging.getLogger(__name__)

# Message type -> its planner; the type is also the scope a key needs for it, as over HTTP.
PLANNERS: dict[str, Planner] = {
    "chat.completions": prepare_chat,
    "completions": prepare_completion,
    "responses": prepare_response,
    "messages": prepare_messages,
}
# Message types whose errors take Anthropic's shape (the rest: OpenAI's).
ANTHROPIC_TYPES = frozenset({"messages"})
# The close code when the credential stops standing, after an error frame saying why (4000-4999
# are the application's; 4401 echoes HTTP's 401).
CLOSE_CREDENTIAL_REFUSED = 4401
MAX_GENERATIONS_PER_CONNECTION = 16
MAX_ID_LENGTH = 128


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin1")
    return None


class _UnreadableFrame:
    """A frame that is not a JSON object (or nests too deep): answered with ``error``."""

    def __init__(self, error: ApiError):
        self.error = error


def _not_authenticated() -> ApiError:
    return ApiError(
        'Authenticate first: send {"type": "auth", "api_key": "sk-..."}.',
        status=401,
        code="invalid_api_key",
    )


class GenerationConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        self.principal: Principal | None = None
        self.credential: credentials.Credential | None = None
        self.generations: dict[str, asyncio.Task] = {}
        self.cancel_requested: set[str] = set()
        self.ended = False  # the credential stopped standing; the socket is closing
        self.watcher = asyncio.create_task(self._watch_credential())
        await self.accept()
        # Credentials at the handshake (Bearer header, ?api_key=, a staff session) or later in
        # an "auth" message: browsers cannot set headers on a WebSocket.
        try:
            credential = credentials.websocket_credential(self.scope)
            principal = await credential.authenticate(endpoint="websocket")
        except AccessError as exc:
            if _header(self.scope, b"authorization") or b"api_key=" in self.scope.get(
                "query_string", b""
            ):
                await self._error(None, error_from_exception(exc))
            return
        await self._signed_in(credential, principal)

    async def disconnect(self, code):
        # A closed socket aborts everything it was generating.
        if self.watcher is not asyncio.current_task():
            self.watcher.cancel()
        await self._cancel_all()

    async def _cancel_all(self) -> None:
        tasks = list(self.generations.values())
        self.cancel_requested.update(self.generations)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def receive_json(self, content: Any, **kwargs):
        if self.ended:
            return
        if isinstance(content, _UnreadableFrame):
            await self._error(None, content.error)
            return
        if not isinstance(content, dict):
            await self._error(None, invalid_request("Each message must be a JSON object."))
            return
        kind = content.get("type")
        if kind == "auth":
            await self._authenticate(content.get("api_key"))
        elif kind == "cancel":
            await self._cancel(content.get("id"))
        elif kind == "models":
            await self._models()
        elif isinstance(kind, str) and kind in PLANNERS:  # a list or object is no key
            await self._start(kind, content)
        else:
            await self._error(
                content.get("id"),
                invalid_request(
                    "type must be one of auth, models, chat.completions, completions, "
                    "responses, messages, cancel.",
                    param="type",
                ),
            )

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        # Channels raises on a binary or empty frame, and the connection dies with 1011.
        if not text_data:
            error = invalid_request("Each message must be a JSON object in a text frame.")
            await self.receive_json(_UnreadableFrame(error))
            return
        await super().receive(text_data=text_data, **kwargs)

    async def decode_json(self, text_data):
        # The HTTP body parser (inference/schemas/validation.py): a frame nested too deep (or
        # not JSON, or not an object) gets the same 400 in an error frame, never a crash.
        try:
            return parse_json_body(text_data.encode("utf-8", "surrogatepass"))
        except ApiError as error:
            return _UnreadableFrame(error)

    async def _signed_in(self, credential: credentials.Credential, principal: Principal) -> None:
        self.credential, self.principal = credential, principal
        await self.send_json({"type": "auth.ok", "tenant": principal.tenant_slug})

    async def _authenticate(self, api_key) -> None:
        try:
            credential = credentials.key_credential(api_key, self.scope)
            principal = await credential.authenticate(endpoint="websocket")
        except Exception as exc:  # reported to the client
            self.credential = self.principal = None
            await self._error(None, error_from_exception(exc))
            return
        await self._signed_in(credential, principal)

    async def _allowed(self, endpoint: str, gen_id) -> Principal | None:
        """The caller, checked again for ``endpoint`` (no database query for a cached key).
        None when refused: a credential that no longer stands ends the session; a missing
        scope is an error tagged with ``gen_id``."""
        if self.credential is None:
            await self._error(gen_id, _not_authenticated())
            return None
        try:
            self.principal = await self.credential.recheck(endpoint=endpoint)
        except Exception as exc:
            error = error_from_exception(exc)
            if error.status == 401:
                await self._end_session(error)
            else:
                await self._error(gen_id, error)
            return None
        return self.principal

    async def _watch_credential(self) -> None:
        """Check the credential again every WEBSOCKET_AUTH_RECHECK_SECONDS. A key's check is
        the key cache's (Redis' auth epoch at most every AUTH_EPOCH_CHECK_SECONDS per process), so
        a revocation ends the session within about the sum of the two."""
        interval = float(getattr(settings, "WEBSOCKET_AUTH_RECHECK_SECONDS", 0.5))
        # The database or Redis away: keep serving and check again; one line when the outage
        # starts and one when it ends, not a traceback every interval on every open socket.
        outage = OutageLog(logger, "websocket credential check", service="the database or Redis")
        while not self.ended:
            await asyncio.sleep(interval)
            credential = self.credential
            if credential is None:
                continue
            try:
                principal = await credential.recheck()
            except AccessError as exc:
                outage.answered()
                if exc.status == 401 and credential is self.credential:
                    await self._end_session(exc)
                continue
            except DATA_OUTAGE_ERRORS as exc:
                outage.failed(exc)
                continue
            except Exception:  # a bug: told in full, and the socket keeps serving
                logger.warning("could not check a websocket's credential again", exc_info=True)
                continue
            outage.answered()
            if credential is self.credential:
                self.principal = principal

    async def _end_session(self, error: ApiError) -> None:
        """The credential no longer stands: abort every generation, say why, close."""
        if self.ended:
            return
        self.ended = True
        self.credential = self.principal = None
        await self._cancel_all()
        await self._error(None, error)
        await self.close(code=CLOSE_CREDENTIAL_REFUSED)

    async def _models(self) -> None:
        principal = await self._allowed("models", None)
        if principal is None:
            return
        # Adapters come after the base models, each naming its base as ``parent``, as in
        # /v1/models; ``model="<adapter>"`` runs on the base model's engines.
        models = await visible_models(principal, with_adapters=True)
        data = []
        for m in models:
            item = {
                "id": m.name,
                "max_model_len": m.max_model_len,
                "kind": "embedding" if m.is_embedding else "generation",
            }
            if m.parent is not None:
                item["parent"] = m.parent
            data.append(item)
        await self.send_json({"type": "models", "data": data})

    async def _start(self, message_type: str, message: dict) -> None:
        gen_id = message.get("id")
        if not isinstance(gen_id, str) or not gen_id or len(gen_id) > MAX_ID_LENGTH:
            await self._error(
                None,
                invalid_request(
                    f"id must be a non-empty string of at most {MAX_ID_LENGTH} characters.",
                    param="id",
                ),
            )
            return
        principal = await self._allowed(message_type, gen_id)
        if principal is None:
            return
        if gen_id in self.generations:
            await self._error(gen_id, invalid_request("This id is already generating.", param="id"))
            return
        if len(self.generations) >= MAX_GENERATIONS_PER_CONNECTION:
            await self._error(
                gen_id,
                ApiError(
                    f"At most {MAX_GENERATIONS_PER_CONNECTION} generations per connection.",
                    status=429,
                    type="requests",
                    code="rate_limit_exceeded",
                ),
            )
            return
        body = message.get("body")
        task = asyncio.create_task(self._generate(gen_id, message_type, body, principal))
        self.generations[gen_id] = task
        task.add_done_callback(lambda _t: self.generations.pop(gen_id, None))

    async def _cancel(self, gen_id) -> None:
        task = self.generations.get(gen_id) if isinstance(gen_id, str) else None
        if task is None:
            await self._error(gen_id, invalid_request("No generation with this id.", param="id"))
            return
        # Also flagged: Python 3.11's asyncio.wait_for can swallow a cancellation that lands
        # as its inner future completes; the generation loop checks the flag at every chunk.
        self.cancel_requested.add(gen_id)
        task.cancel()  # closing the chunk stream inside aborts the request in the engine
        await asyncio.gather(task, return_exceptions=True)
        self.cancel_requested.discard(gen_id)
        await self.send_json({"type": "done", "id": gen_id, "cancelled": True})

    async def _generate(self, gen_id: str, message_type: str, body, principal: Principal) -> None:
        try:
            if not isinstance(body, dict):
                raise invalid_request("body must be a JSON object.", param="body")
            generation = await Generation.admit(
                PLANNERS[message_type], principal, {**body, "stream": True}
            )
            await generation.open()
            events = generation_events(generation)  # stored, if the request asked
            try:
                async for event in events:
                    if gen_id in self.cancel_requested:
                        raise asyncio.CancelledError
                    await self.send_json({"type": "chunk", "id": gen_id, "data": event})
            finally:
                await events.aclose()
            await self.send_json({"type": "done", "id": gen_id})
        except Exception as exc:  # reported to the client, tagged with its id
            await self._error(
                gen_id, error_from_exception(exc), anthropic=message_type in ANTHROPIC_TYPES
            )

    async def _error(self, gen_id, error: ApiError, *, anthropic: bool = False) -> None:
        """An error frame: OpenAI's ``error`` object, or Anthropic's for a Messages one."""
        body = anthropic_error(error) if anthropic else error.body()
        # An id echoed back is one a generation could have had: a string, else null.
        gen_id = gen_id if isinstance(gen_id, str) else None
        message = {**body, "type": "error", "id": gen_id, "status": error.status}
        try:
            await self.send_json(message)
        except Exception:  # the socket is already gone
            logger.debug("could not send an error to a closed websocket")
