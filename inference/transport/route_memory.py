"""What a router sent where lately: the prefixes it routed to each engine in the last few
seconds, and each engine's recent demand (prompt tokens sent to it, decaying).

Engines publish their prefix index once per status beat (engine/service/prefix_index.py), so
a conversation's second turn often arrives before the engine has published the blocks of its
first: the index says nobody holds them and the turn would land on a random replica, missing
the cache and splitting the conversation's history over two. The router remembers what it
sent for longer than an index takes to catch up (RECENT_S), and counts it as held.

Demand is what keeps new conversations balanced over the replicas: a prompt nobody holds goes
to the replica with the least of it among the least busy (inference/transport/prefix_router.py),
and every later turn follows its prefix there. A replica's busy count alone would not do: a
conversation between turns is not running anywhere, yet it will come back to where its prefix
is. Each router (one per API process) balances its own traffic; together they balance in
expectation.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

# Longer than an engine's index takes to show a prefix it was sent: one status beat (1 s by
# default) plus the prefill itself, with room for a loaded host.
RECENT_S = 5.0
# Bounds the memory whatever the request rate: about 100 bytes each.
MAX_REMEMBERED = 200_000
# How long a routed prompt keeps counting towards its replica's demand (its e-folding time):
# a conversation's turns come back within seconds to minutes.
DEMAND_DECAY_S = 60.0


class RouteMemory:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._holder: dict[bytes, tuple[str, float]] = {}  # index member -> (engine, when)
        self._order: deque[tuple[float, bytes]] = deque()
        self._demand: dict[str, tuple[float, float]] = {}  # engine -> (tokens, as of when)

    def remember(self, engine_id: str, members: bytes, member_size: int, tokens: int) -> None:
        """``engine_id`` was sent a prompt of ``tokens`` tokens whose full blocks' index
        members are ``members`` (concatenated, ``member_size`` bytes each)."""
        now = self.clock()
        self._demand[engine_id] = (self.demand(engine_id, now) + tokens, now)
        for at in range(0, len(members), member_size):
            member = members[at : at + member_size]
            self._holder[member] = (engine_id, now)
            self._order.append((now, member))
        self._forget(now)

    def recently_sent(self, members: bytes, member_size: int) -> tuple[str, int]:
        """(engine, blocks): the engine most recently sent the longest leading run of
        ``members``, and how many blocks long it is; ("", 0) when none was sent lately. A
        member names its block's whole prefix (chained hashes), so the last one found wins."""
        now = self.clock()
        for blocks in range(len(members) // member_size, 0, -1):
            entry = self._holder.get(members[(blocks - 1) * member_size : blocks * member_size])
            if entry is not None and now - entry[1] <= RECENT_S:
                return entry[0], blocks
        return "", 0

    def demand(self, engine_id: str, now: float | None = None) -> float:
        """Prompt tokens sent to ``engine_id`` lately, each counting less as it ages."""
        tokens, since = self._demand.get(engine_id, (0.0, 0.0))
        if not tokens:
            return 0.0
        now = self.clock() if now is None else now
        return tokens * math.exp(-(now - since) / DEMAND_DECAY_S)

    def _forget(self, now: float) -> None:
        order, holder = self._order, self._holder
        while order and (now - order[0][0] > RECENT_S or len(order) > MAX_REMEMBERED):
            when, member = order.popleft()
            entry = holder.get(member)
            if entry is not None and entry[1] == when:  # not sent again since
                del holder[member]
