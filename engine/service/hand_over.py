"""Waiting requests handed over to a peer engine of the model whose queue ran dry.

Why: every engine of a model reads the shared stream up to its bound, and under the fair policy
that bound includes the look-ahead (272 requests by default: read_ahead.py). Whichever reader
comes back first takes what the stream holds, so a burst splits unevenly: one tenant's 128
requests over two fair engines (``--max-num-seqs 8``) split 99:29 to 70:58 over six bursts,
the engine with fewer ran dry while the other worked through its queue, and a burst took 1.32 s
against 1.16 s on two FIFO engines, whose bound of 16 splits it evenly (bench/replica_burst.py,
2026-11-28, Zen 4). The shared stream's work stealing ended where the look-ahead began.

What: an engine with no request waiting and a batch slot free (``Starvation``) says so on the
model's idle stream (``protocol.Idle``: its load and the room its reader has), as it starts and
then at most every IDLE_EVERY_S while it has worked since it last said so. Every other engine
of the model reads it at once (the broadcast reader), and one holding waiting requests it has
not started evens out its load (running + waiting) with the idle one by handing over half the
difference, within that room, of the requests that wait for a batch slot here (not those its
next step starts: under an explicit ``--max-queued`` an engine with slots free would otherwise
pass on what it had just read). It picks those it would start last: the latest arrivals of the
tenant with the most requests waiting here. Requests routed here (a direct stream: the API's
prefix router, or an earlier hand-over) stay, so a request moves at most once and two engines
never pass requests back and forth. With it the same bursts split 70:58 to 65:63 and took as
long as on the FIFO engines (fair / FIFO 0.99).

How, crash safety unchanged: the loop thread takes the requests out of its engine, and the
output writer moves each in the transaction of its next write: the entry acknowledged and
deleted here, and added to the idle engine's direct stream while that engine's status key
exists, else to the shared stream (direct_routing.ROUTE_SCRIPT). Should the idle engine die,
whoever takes over from it moves its direct stream back to the shared stream, as for any
routed request.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from engine import protocol
from engine.direct_routing import is_direct_entry

if TYPE_CHECKING:
    from engine.outputs import EngineStats
    from engine.service.loop import EngineService

logger = logging.getLogger(__name__)

# An engine says it is idle at most this often: a queue that runs dry now and then under steady
# load would otherwise send a message at every turn.
IDLE_EVERY_S = 0.25


class Starvation:
    """The loop's check after each step: whether to say it could take more; and the
    engine's hand-over totals (what it said, what it gave) for its status record."""

    def __init__(self, engine_id: str):
        self.engine_id = engine_id
        self._work_at_message: int | None = None  # tokens computed when it last said so
        self._said_at = -IDLE_EVERY_S
        # Totals for the status record (and /metrics), kept by the loop thread.
        self.num_announced = 0
        self.num_handed_over = 0  # requests given to idle peers (``hand_over``)

    def check(self, stats: EngineStats, unread: int, room: int) -> protocol.Idle | None:
        """The message to send now, if any: none waiting (``unread``: requests read and not yet
        in the stats), a batch slot free, room to read more, and work done since the last
        message, at most every IDLE_EVERY_S. An engine idle for long has nothing new to say
        (its reader takes whatever reaches the stream); one that has just started has."""
        now, work = time.monotonic(), stats.prompt_tokens_total + stats.generation_tokens_total
        starving = stats.num_waiting + unread == 0 and stats.num_running < stats.max_num_seqs
        if (
            not starving
            or room <= 0
            or work == self._work_at_message
            or now - self._said_at < IDLE_EVERY_S
        ):
            return None
        self._work_at_message, self._said_at = work, now
        self.num_announced += 1
        return protocol.Idle(engine_id=self.engine_id, room=room, load=stats.num_running)


def hand_over(service: EngineService, idle: protocol.Idle) -> int:
    """Hand ``idle``'s engine up to half the load difference; returns how many moved."""
    if idle.engine_id == service.settings.engine_id or service.draining:
        return 0
    stats = service.engine.stats()
    load = stats.num_running + stats.num_waiting
    # Only requests that wait for a batch slot: those the next step starts here stay.
    queued = stats.num_waiting - max(0, stats.max_num_seqs - stats.num_running)
    count = min(idle.room, (load - idle.load) // 2, queued)
    chosen = last_to_start(service, count) if count > 0 else []
    if not chosen:
        return 0
    service.engine.abort_request(chosen)
    service.starvation.num_handed_over += len(chosen)
    for active in map(service.active.pop, chosen):
        service.job.hand_over(idle.engine_id, active.entry_id, active.request)
    logger.info("%d waiting requests handed over to idle engine %s", len(chosen), idle.engine_id)
    return len(chosen)


def last_to_start(service: EngineService, count: int) -> list[str]:
    """Up to ``count`` waiting requests that have produced nothing and came from the shared
    stream: the tenant with the most of them gives its latest first."""
    by_tenant: dict[str, list[str]] = defaultdict(list)
    waiting = {sample.external_id for sample in service.engine.scheduler.waiting}
    for request_id, active in service.active.items():  # in the order they were admitted
        if request_id in waiting and not active.started and not is_direct_entry(active.entry_id):
            by_tenant[active.request.tenant].append(request_id)
    chosen: list[str] = []
    while len(chosen) < count and by_tenant:
        tenant = max(by_tenant, key=lambda t: len(by_tenant[t]))
        chosen.append(by_tenant[tenant].pop())
        if not by_tenant[tenant]:
            del by_tenant[tenant]
    return chosen
