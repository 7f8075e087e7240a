"""In-flight prefix deduplication: a waiting request does not start on prompt blocks that a
running request's chunked prefill is about to compute; it waits and takes them as cache hits.

Why: a full block enters the prefix cache when the step that writes it is scheduled
(kv_cache_manager.py), so a request admitted while another request's prefill of the same
prefix is still being chunked (the fair policy cuts shared steps to ``fair_step_tokens``)
finds only the chunks scheduled so far and would compute the rest of the prefix again: once
more for every request admitted meanwhile.

``InFlightBlocks`` maps the hash of each full prompt block that a running request has not yet
scheduled to that request. Block hashes are chained and salted (block_hash.py), so a match
means the very same prefix under the same salt: tenants that share nothing never wait on each
other. Only prefills that go on in the step count: those scheduled before admissions, and those
the fair policy puts after them. The prefill the best waiting request would wait on goes
before admissions (``put_holder_ahead``), so that request never waits on a prefill the step
leaves out (a cap spent); another may wait a step on one put after admissions that gets
nothing, until it is the best waiting request itself (its tenant's counter stands still). Only running
requests are waited on, and they wait on no one: nobody waits forever. Requests admitted in
the step are left out: one admitted with its prefill unfinished was cut by the step's token
budget or prompt tokens, so no prefill starts behind it in that step anyway.

The map is built on first use in a step, from those prefills only, so it costs their
remaining prompt blocks, never every block of every request. What it holds that stops being
true within the step does no harm: entries for blocks scheduled since (a waiting request only
asks about the first block it misses in the cache, never a registered one), and a prefill
preempted after admission (its waiters wait one step more, then find it gone).

Under fcfs and priority the running prefills take the budget before any admission, so one is
left unfinished only when no budget is left to admit anything: nobody waits. It is under the
fair policy, whose shared steps cap prompt tokens, that requests wait.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.kv_cache_manager import KVCacheManager
    from engine.request import Request

logger = logging.getLogger(__name__)


class InFlightBlocks:
    def __init__(self, kv_cache: KVCacheManager) -> None:
        self.kv_cache = kv_cache
        self.num_deferrals = 0  # admissions put off to wait for another request's prefill
        self._prefills: list[Request] = []
        self._holders: dict[bytes, Request] | None = None  # None: not built this step

    def begin_step(self, prefills: list[Request]) -> None:
        """Forget the map; the next question builds it from ``prefills``, the running requests
        that compute in this step."""
        self._prefills = prefills
        self._holders = None

    def holder(self, request: Request, num_hit_blocks: int) -> Request | None:
        """The prefill of this step that is yet to compute the block right after ``request``'s
        ``num_hit_blocks`` cache hits, or None (no one, or that block could not be a hit)."""
        if num_hit_blocks >= self.kv_cache.max_hit_blocks(request):
            return None
        if self._holders is None:
            self._holders = {}
            block_size = self.kv_cache.block_size
            for prefill in self._prefills:
                start = prefill.num_computed_tokens // block_size
                end = prefill.num_prompt_tokens // block_size
                for block_hash in prefill.block_hashes[start:end]:
                    self._holders.setdefault(block_hash, prefill)
        return self._holders.get(request.block_hashes[num_hit_blocks])

    def defers(self, request: Request, num_hit_blocks: int) -> bool:
        """True (counted, logged) if the waiting ``request`` is to wait for the running prefill
        that is yet to compute its block after its ``num_hit_blocks`` cache hits.

        The scheduler asks only while the step has prompt tokens left: past them no prefill
        starts anyway, and every request waiting on one prefill would cost its cache lookup.
        """
        holder = self.holder(request, num_hit_blocks)
        if holder is None:
            return False
        self.num_deferrals += 1
        logger.debug(
            "%s waits for %s to compute its block %d",
            request.request_id,
            holder.request_id,
            num_hit_blocks,
        )
        return True

    def put_holder_ahead(self, head: Request, ahead: list[Request], behind: list[Request]) -> None:
        """Move the prefill the best waiting request ``head`` would wait on from the fair
        policy's ``behind`` to ``ahead``: ``head``'s tenant is the one most under its share, and
        it would otherwise wait on a prefill put behind the admissions of other tenants."""
        if not behind:
            return
        self.begin_step(behind)
        hits, _ = self.kv_cache.get_computed_blocks(head)
        holder = self.holder(head, len(hits))
        if holder in behind:
            behind.remove(holder)
            ahead.append(holder)
