"""Cache-aware routing: send a request to the replica that holds its prompt's prefix cached,
when that replica is clearly the better place for it; else to the shared stream, where
whichever replica has room takes it (work stealing).

For each live, non-draining engine of the model the router hashes the prompt as that engine
would (same block size, the request's server-side salt, its shared-prefix boundary, its LoRA
adapter's version: engine/core/block_hash.py) and asks the engine's prefix index (a Redis set
of its cached block hashes, engine/service/prefix_index.py) how many leading blocks it holds:
one pipelined round trip for all replicas. Because the hashes carry the tenant's salt, a
lookup can only ever find blocks of the same tenant (or of a declared public prefix): the
index tells nothing across tenants.

The rule. A replica's cost for the request is its uncached prompt tokens times its load
(1 + (running + waiting) / max_num_seqs, counting requests routed to it since its last status
record). The shared stream's expected cost is that of the least loaded replica, as if it held
nothing. The request goes to the cheapest replica when it holds at least one block, costs at
most ROUTE_GAIN of the shared stream's, and is not backlogged (fewer waiting than its batch);
otherwise to the shared stream. A request with a LoRA adapter only counts replicas that have
loaded it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis.asyncio as aioredis

from engine import protocol
from engine.adapters import AdapterIdentity
from engine.core.block_hash import chain_block_hashes, public_prefix_or_none
from engine.direct_routing import ROUTE_SCRIPT, index_member
from engine.protocol import FIELD, EngineStatus, Keys

logger = logging.getLogger(__name__)

# "Clearly better": the chosen replica's cost at most this fraction of the shared stream's.
ROUTE_GAIN = 0.5


@dataclass(frozen=True, slots=True)
class Route:
    engine_id: str  # "" for the shared stream
    cached_tokens: int = 0  # on the chosen replica, as its index said
    reason: str = ""


SHARED = Route("", reason="one replica")


class PrefixRouter:
    def __init__(self, redis: aioredis.Redis, keys: Keys):
        self.redis, self.keys = redis, keys
        self._route_script = redis.register_script(ROUTE_SCRIPT)
        # Requests routed to an engine since the status record the router last saw of it
        # (engine id -> (status updated_at, count)): a burst must not all pile onto one
        # replica whose load the router would only learn a second later.
        self._routed: dict[str, tuple[float, int]] = {}

    async def send(
        self, model: str, message: protocol.GenerateRequest, engines: list[EngineStatus]
    ) -> Route:
        """Choose where ``message`` goes among ``engines`` and submit it there."""
        route = await self.choose(message, engines)
        direct = await self.submit(model, message, route)
        if len(engines) > 1:  # a decision was made: in the request's trace
            logger.info(
                "%s: routed to %s (%s; %d prompt tokens cached there)",
                message.request_id,
                route.engine_id if direct else "the shared stream",
                route.reason,
                route.cached_tokens,
            )
        return route

    async def choose(self, message: protocol.GenerateRequest, engines: list[EngineStatus]) -> Route:
        """Where ``message`` should go among ``engines`` (live, non-draining)."""
        candidates = [s for s in engines if s.block_size > 0 and _serves_adapter(s, message)]
        if len(engines) < 2 or not candidates:
            return SHARED
        prompt = message.prompt_token_ids
        # Engines that file the prompt alike (block size, adapter version) share one hashing.
        hashes: dict[tuple[int, str], list[bytes]] = {}
        for status in candidates:
            key = _hashing_key(status, message)
            if key not in hashes:
                hashes[key] = [index_member(h) for h in _prompt_hashes(message, *key)]
        if not any(hashes.values()):
            return Route("", reason="prompt shorter than a block")
        async with self.redis.pipeline(transaction=False) as pipe:
            for status in candidates:
                members = hashes[_hashing_key(status, message)] or [b""]
                pipe.smismember(self.keys.prefix_index(status.model, status.engine_id), members)
            found = await pipe.execute()
        cached = {
            s.engine_id: _leading_run(hits) * s.block_size
            for s, hits in zip(candidates, found, strict=True)
        }
        routed = {s.engine_id: self._routed_since(s) for s in engines}
        load = {s.engine_id: _load(s, routed[s.engine_id]) for s in engines}
        holders = [s for s in candidates if cached[s.engine_id] > 0]
        if not holders:
            return Route("", reason="no replica holds its prefix")
        best = min(holders, key=lambda s: (len(prompt) - cached[s.engine_id]) * load[s.engine_id])
        best_cost = (len(prompt) - cached[best.engine_id]) * load[best.engine_id]
        shared_cost = len(prompt) * min(load.values())
        if best.num_waiting + routed[best.engine_id] >= max(1, best.max_num_seqs):
            return Route("", cached[best.engine_id], reason=f"{best.engine_id} is backlogged")
        if best_cost > ROUTE_GAIN * shared_cost:
            return Route("", cached[best.engine_id], reason="no replica is clearly better")
        return Route(best.engine_id, cached[best.engine_id], reason="holds its prefix")

    async def submit(self, model: str, message: protocol.GenerateRequest, route: Route) -> bool:
        """Add ``message`` to the chosen engine's direct stream, or to the shared stream when
        the route says so or the engine's status expired meanwhile (atomically, in Redis:
        engine/direct_routing.py). True when it went to the engine."""
        payload = protocol.encode(message)
        if not route.engine_id:
            await self.redis.xadd(self.keys.requests(model), {FIELD: payload})
            return False
        keys = [
            self.keys.status(model, route.engine_id),
            self.keys.direct_requests(model, route.engine_id),
            self.keys.requests(model),
        ]
        direct = bool(await self._route_script(keys=keys, args=[FIELD, payload]))
        if direct:
            seen_at, count = self._routed.get(route.engine_id, (0.0, 0))
            self._routed[route.engine_id] = (seen_at, count + 1)
        return direct

    def _routed_since(self, status: EngineStatus) -> int:
        """Requests this router sent to the engine since its status record was written."""
        seen_at, count = self._routed.get(status.engine_id, (status.updated_at, 0))
        if seen_at != status.updated_at:  # a newer record counts those itself
            count = 0
            self._routed[status.engine_id] = (status.updated_at, 0)
        return count


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


def _leading_run(hits: list[int]) -> int:
    """How many leading blocks are present: a chained hash names its whole prefix, so the
    first miss ends what the engine can reuse."""
    for i, hit in enumerate(hits):
        if not hit:
            return i
    return len(hits)
