"""KV cache manager: which blocks each request holds, prefix-cache lookups, allocation.

The scheduler asks two questions: "which of this request's leading blocks are already cached?"
(``get_computed_blocks``) and "give it room for N more tokens, or tell me there is none"
(``allocate_slots``). Only full blocks are ever cached; a full block is registered as soon as
the step that writes it is scheduled, so requests scheduled later in the same step can share it
(the runner writes every layer's KV before any attention reads it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.core.block_pool import BlockPool, KVCacheBlock
from engine.core.block_table import BlockTableRows

if TYPE_CHECKING:
    from engine.request import Request


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True) -> None:
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # Block ids mirror req_to_blocks, kept so the model runner reads ints, not objects.
        self.req_to_block_ids: dict[str, list[int]] = {}
        # And as rows of one array, from which a step's block tables are gathered.
        self.block_rows = BlockTableRows()
        self._num_cached_blocks: dict[str, int] = {}

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_total_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def usage(self) -> float:
        return self.pool.usage

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """Longest run of cached leading blocks and the number of tokens they hold.

        At least one token is always left to compute: the model must run on the last prompt
        token to produce logits. Requests asking for prompt logprobs skip the cache (the
        logprobs of cached positions would never be computed).
        """
        hits: list[KVCacheBlock] = []
        for block_hash in request.block_hashes[: self.max_hit_blocks(request)]:
            block = self.pool.get_cached_block(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits, len(hits) * self.block_size

    def max_hit_blocks(self, request: Request) -> int:
        """How many leading blocks of ``request`` could be cache hits (see
        ``get_computed_blocks``): none without caching or with prompt logprobs."""
        if not self.enable_caching or request.sampling_params.prompt_logprobs is not None:
            return 0
        return (request.num_tokens - 1) // self.block_size

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        new_computed_blocks: list[KVCacheBlock] | None = None,
    ) -> list[KVCacheBlock] | None:
        """Make room for ``num_new_tokens`` more tokens; None (and no change) if blocks run out."""
        blocks = self.req_to_blocks.get(request.request_id)
        if not new_computed_blocks and blocks is not None:
            num_tokens = request.num_computed_tokens + num_new_tokens
            if num_tokens <= len(blocks) * self.block_size:
                # Room in the blocks it holds: most decode steps, checked first (every running
                # request, every step).
                if self.enable_caching:
                    self._cache_full_blocks(request, num_tokens)
                return []
        computed = new_computed_blocks or []
        if blocks is None:
            blocks = []
        num_computed = request.num_computed_tokens + len(computed) * self.block_size
        num_required = -(-(num_computed + num_new_tokens) // self.block_size)
        num_new_blocks = num_required - len(blocks) - len(computed)
        # Cache hits sitting in the free queue stop being free once we take them.
        num_evictable_hits = sum(1 for b in computed if b.ref_cnt == 0)
        if num_new_blocks > self.pool.num_free_blocks - num_evictable_hits:
            return None
        if request.request_id not in self.req_to_blocks:
            self.req_to_blocks[request.request_id] = blocks
            self.req_to_block_ids[request.request_id] = []
            self._num_cached_blocks[request.request_id] = 0
        block_ids = self.req_to_block_ids[request.request_id]
        num_ids = len(block_ids)
        if computed:
            self.pool.touch(computed)
            blocks.extend(computed)
            block_ids.extend(b.block_id for b in computed)
            self._num_cached_blocks[request.request_id] = len(blocks)
        new_blocks = self.pool.get_new_blocks(num_new_blocks) if num_new_blocks > 0 else []
        blocks.extend(new_blocks)
        block_ids.extend(b.block_id for b in new_blocks)
        if len(block_ids) > num_ids:
            self.block_rows.extend(request.request_id, block_ids[num_ids:])
        if self.enable_caching:
            self._cache_full_blocks(request, num_computed + num_new_tokens)
        return new_blocks

    def _cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        rid = request.request_id
        start = self._num_cached_blocks[rid]
        end = min(num_tokens // self.block_size, len(request.block_hashes))
        if end <= start:
            return
        blocks = self.req_to_blocks[rid]
        for i in range(start, end):
            self.pool.cache_block(blocks[i], request.block_hashes[i])
        self._num_cached_blocks[rid] = end

    def free(self, request: Request, num_written_tokens: int | None = None) -> None:
        """Release every block of ``request`` (last block first, so its tail is evicted first).

        ``num_written_tokens``: when a request is dropped after this step's allocation but
        before its forward pass, only that many tokens really hold KV; full blocks past them
        were registered in advance and must not stay findable.
        """
        blocks = self.req_to_blocks.pop(request.request_id, None)
        self.req_to_block_ids.pop(request.request_id, None)
        self.block_rows.release(request.request_id)
        self._num_cached_blocks.pop(request.request_id, None)
        if not blocks:
            return
        if num_written_tokens is not None:
            for block in blocks[num_written_tokens // self.block_size :]:
                self.pool.uncache_block(block)
        self.pool.free_blocks(reversed(blocks))

    def free_excess_blocks(self, request: Request, num_tokens: int) -> None:
        """Give back the blocks past the first ``num_tokens`` tokens: those allocated for
        draft tokens that verification rejected (engine/spec_decode/). They were never
        registered in the prefix cache (only blocks of known tokens are)."""
        blocks = self.req_to_blocks.get(request.request_id)
        num_kept = -(-num_tokens // self.block_size)
        if not blocks or len(blocks) <= num_kept:
            return
        excess = blocks[num_kept:]
        del blocks[num_kept:]
        del self.req_to_block_ids[request.request_id][num_kept:]
        self.block_rows.truncate(request.request_id, num_kept)
        self.pool.free_blocks(reversed(excess))

    def get_block_ids(self, request_id: str) -> list[int]:
        return self.req_to_block_ids[request_id]
