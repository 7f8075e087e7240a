"""Cache-aware routing: send a request to the replica that holds its prompt's prefix cached,
when that replica is clearly the better place for it; else to the shared stream, where
whichever replica has room takes it (work stealing).

For each live, non-draining engine of the model the router hashes the prompt as that engine
would (same block size, the request's server-side salt, its shared-prefix boundary, its LoRA
adapter's version: engine/core/block_hash.py) and asks the engine's prefix index (a Redis set
of its cached block hashes, engine/service/prefix_index.py) how many leading blocks it holds.
Because the hashes carry the tenant's salt, a lookup can only ever find blocks of the same
tenant (or of a declared public prefix): the index tells nothing across tenants.

The rule. A replica's cost for the request is its uncached prompt tokens times its load
(1 + (running + waiting) / max_num_seqs, counting requests routed to it since its last status
record). The shared stream's expected cost is that of the least loaded replica, as if it held
nothing. The request goes to the cheapest replica when it holds at least one block, costs at
most ROUTE_GAIN of the shared stream's, and is not backlogged (fewer waiting than its batch);
otherwise to the shared stream. A request with a LoRA adapter only counts replicas that have
loaded it. A replica holds what its index says and what this router sent it in the last few
seconds, which its index may not show yet (inference/transport/route_memory.py).

A prompt no replica holds starts a conversation whose later turns will follow it: it is placed
on the replica with the least recent demand among those with room and at most one request
busier than the least busy (never a busier one than work stealing would find), and goes to
the shared stream only when none has room. Work stealing alone would scatter new
conversations at random, leaving one replica twice another's load for as long as they last.

The lookup, the rule and the add run in one Lua script (engine/direct_routing.py,
CHOOSE_AND_ROUTE_SCRIPT): one round trip per request, the prompt's hashes sent once as one
string, and each index read only up to its first miss. Two round trips (the lookups, then the
add) cost a routed request 2.3 ms of its 7.6 ms time to first token on a quiet 2-core machine
(tiny model, four replicas), more than the prefill it saved.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis.asyncio as aioredis

from engine import protocol
from engine.adapters import AdapterIdentity
from engine.core.block_hash import chain_block_hashes, public_prefix_or_none
from engine.direct_routing import (
    BACKLOGGED,
    CHOOSE_AND_ROUTE_SCRIPT,
    HOLDER_GONE,
    NO_HOLDER,
    NOT_CLEARLY_BETTER,
    PLACED,
    PREFIX_INDEX_BYTES,
    ROUTE_SCRIPT,
    ROUTED,
    index_member,
)
from engine.protocol import FIELD, EngineStatus, Keys
from inference.transport.route_memory import RouteMemory

logger = logging.getLogger(__name__)

# "Clearly better": the chosen replica's cost at most this fraction of the shared stream's.
ROUTE_GAIN = 0.5


@dataclass(frozen=True, slots=True)
class Route:
    engine_id: str  # "" for the shared stream
    cached_tokens: int = 0  # on the chosen replica, as its index said
    reason: str = ""


SHARED = Route("", reason="one replica")
SHORT_PROMPT = Route("", reason="prompt shorter than a block")


class PrefixRouter:
    def __init__(self, redis: aioredis.Redis, keys: Keys):
        self.redis, self.keys = redis, keys
        self._choose_and_route = redis.register_script(CHOOSE_AND_ROUTE_SCRIPT)
        self._route_script = redis.register_script(ROUTE_SCRIPT)
        # Requests routed to an engine since the status record the router last saw of it
        # (engine id -> (status updated_at, count)): a burst must not all pile onto one
        # replica whose load the router would only learn a second later.
        self._routed: dict[str, tuple[float, int]] = {}
        self.memory = RouteMemory()

    async def send(
        self, model: str, message: protocol.GenerateRequest, engines: list[EngineStatus]
    ) -> Route:
        """Choose where ``message`` goes among ``engines`` (live, non-draining) and submit it
        there: one Redis round trip, the lookup, the rule and the add in one script. The
        route names the engine only when the request went to its direct stream."""
        route = await self._decide(message, engines, model=model, payload=protocol.encode(message))
        if len(engines) > 1:  # a decision was made: in the request's trace
            logger.info(
                "%s: routed to %s (%s; %d prompt tokens cached there)",
                message.request_id,
                route.engine_id or "the shared stream",
                route.reason,
                route.cached_tokens,
            )
        return route

    async def choose(self, message: protocol.GenerateRequest, engines: list[EngineStatus]) -> Route:
        """Where ``message`` would go among ``engines`` now; submits nothing."""
        model = engines[0].model if engines else ""
        return await self._decide(message, engines, model=model, payload=b"")

    async def submit(self, model: str, message: protocol.GenerateRequest, route: Route) -> bool:
        """Add ``message`` where a route decided beforehand says: the chosen engine's direct
        stream, or the shared stream when the route says so or the engine's status expired
        meanwhile (atomically, in Redis: engine/direct_routing.py). True when it went to the
        engine."""
        payload = protocol.encode(message)
        if not route.engine_id:
            await self._to_shared(model, payload, route)
            return False
        keys = [
            self.keys.status(model, route.engine_id),
            self.keys.direct_requests(model, route.engine_id),
            self.keys.requests(model),
        ]
        direct = bool(await self._route_script(keys=keys, args=[FIELD, payload]))
        if direct:
            self._count_routed(route.engine_id)
        return direct

    async def _decide(
        self,
        message: protocol.GenerateRequest,
        engines: list[EngineStatus],
        *,
        model: str,
        payload: bytes,
    ) -> Route:
        """The rule (module docstring), run in Redis beside the indexes it reads; with a
        ``payload``, the request is added where the rule sends it in the same script."""
        candidates = [s for s in engines if s.block_size > 0 and _serves_adapter(s, message)]
        if len(engines) < 2 or not candidates:
            return await self._to_shared(model, payload, SHARED)
        # Engines that file the prompt alike (block size, adapter version) share one hashing.
        hash_lists: dict[tuple[int, str], bytes] = {}
        for status in candidates:
            key = _hashing_key(status, message)
            if key not in hash_lists:
                hashes = _prompt_hashes(message, *key)
                hash_lists[key] = b"".join(index_member(h) for h in hashes)
        if not any(hash_lists.values()):
            return await self._to_shared(model, payload, SHORT_PROMPT)
        routed = {s.engine_id: self._routed_since(s) for s in engines}
        load = {s.engine_id: _load(s, routed[s.engine_id]) for s in engines}
        room = {
            s.engine_id: max(1, s.max_num_seqs) - s.num_waiting - routed[s.engine_id]
            for s in candidates
        }
        sent = {
            key: self.memory.recently_sent(members, PREFIX_INDEX_BYTES)
            for key, members in hash_lists.items()
        }
        list_number = {key: i for i, key in enumerate(hash_lists, start=1)}
        keys, per_candidate = [self.keys.requests(model)], []
        for s in candidates:
            keys += [
                self.keys.prefix_index(s.model, s.engine_id),
                self.keys.status(s.model, s.engine_id),
                self.keys.direct_requests(s.model, s.engine_id),
            ]
            key = _hashing_key(s, message)
            sent_to, sent_blocks = sent[key]
            per_candidate += [
                s.block_size,
                repr(load[s.engine_id]),
                room[s.engine_id],
                list_number[key],
                sent_blocks if sent_to == s.engine_id else 0,
            ]
        prompt = len(message.prompt_token_ids)
        shared_cost = prompt * min(load.values())
        place = self._placement(candidates, load, room)
        args = [FIELD, payload, prompt, repr(shared_cost), repr(ROUTE_GAIN), place]
        best, cached, outcome = await self._choose_and_route(
            keys=keys, args=[*args, *per_candidate, *hash_lists.values()]
        )
        engine_id = candidates[best - 1].engine_id if best else ""
        if outcome in (ROUTED, PLACED):
            if payload:
                self._count_routed(engine_id)
                members = hash_lists[_hashing_key(candidates[best - 1], message)]
                self.memory.remember(engine_id, members, PREFIX_INDEX_BYTES, prompt)
            reason = "holds its prefix" if outcome == ROUTED else "a new prefix, least demand"
            return Route(engine_id, cached, reason=reason)
        return Route("", cached, reason=_reason(outcome, engine_id))

    def _placement(
        self, candidates: list[EngineStatus], load: dict[str, float], room: dict[str, int]
    ) -> int:
        """Where a prompt nobody holds goes (a candidate, 1-based; 0: the shared stream): the
        least recent demand among the replicas with room that are at most one request busier
        than the least busy (module docstring)."""
        least = min(load[s.engine_id] for s in candidates)
        eligible = [
            (self.memory.demand(s.engine_id), load[s.engine_id], number)
            for number, s in enumerate(candidates, start=1)
            if room[s.engine_id] > 0
            and load[s.engine_id] <= least + 1 / max(1, s.max_num_seqs) + 1e-9
        ]
        return min(eligible)[2] if eligible else 0

    async def _to_shared(self, model: str, payload: bytes, route: Route) -> Route:
        """Add ``payload`` (if any: a dry run has none) to the shared stream."""
        if payload:
            await self.redis.xadd(self.keys.requests(model), {FIELD: payload})
        return route

    def _count_routed(self, engine_id: str) -> None:
        seen_at, count = self._routed.get(engine_id, (0.0, 0))
        self._routed[engine_id] = (seen_at, count + 1)

    def _routed_since(self, status: EngineStatus) -> int:
        """Requests this router sent to the engine since its status record was written."""
        seen_at, count = self._routed.get(status.engine_id, (status.updated_at, 0))
        if seen_at != status.updated_at:  # a newer record counts those itself
            count = 0
        # Stored even when new, so that the count of a route made now belongs to this record.
        self._routed[status.engine_id] = (status.updated_at, count)
        return count


def _reason(outcome: int, engine_id: str) -> str:
    return {
        NO_HOLDER: "no replica holds its prefix",
        BACKLOGGED: f"{engine_id} is backlogged",
        NOT_CLEARLY_BETTER: "no replica is clearly better",
        HOLDER_GONE: f"{engine_id} is gone",
    }[outcome]


def _load(status: EngineStatus, routed_since: int) -> float:
    busy = status.num_running + status.num_waiting + routed_since
    return 1.0 + busy / max(1, status.max_num_seqs)


def _serves_adapter(status: EngineStatus, message: protocol.GenerateRequest) -> bool:
    adapter = message.adapter
    return adapter is None or status.holds_adapter(adapter.name, adapter.checksum)


def _hashing_key(status: EngineStatus, message: protocol.GenerateRequest) -> tuple[int, str]:
    """What decides how an engine hashes the prompt: its block size and the version of the
    request's adapter it has loaded."""
    adapter = message.adapter
    return status.block_size, status.adapter_checksums.get(adapter.name, "") if adapter else ""


def _prompt_hashes(message: protocol.GenerateRequest, block_size: int, checksum: str):
    """The prompt's full-block hashes as an engine files them (``checksum``: its version of
    the request's adapter)."""
    adapter = None
    if message.adapter is not None:
        adapter = AdapterIdentity(message.adapter.name, checksum)
    try:
        public = public_prefix_or_none(message.shared_prefix_salt, message.shared_prefix_tokens)
    except ValueError:  # the engine refuses it; any route will do
        return []
    return chain_block_hashes(
        message.prompt_token_ids,
        block_size,
        cache_salt=message.cache_salt or None,
        adapter=adapter,
        public_prefix=public,
    )
