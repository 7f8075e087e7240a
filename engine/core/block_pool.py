"""The pool of KV cache blocks: allocated once, handed out, ref-counted, cached, evicted.

Free blocks wait in an LRU queue (an ``OrderedDict`` keyed by block id): new blocks come off
the front, released blocks go to the back. A released block keeps its contents and its hash,
so a later request with the same prefix can take it back out of the middle of the queue in
O(1) (that is why the queue must support removal by key). Eviction is lazy: a cached block
loses its hash only when it is reused for new tokens, oldest-released first. Released blocks
that hold no cached prefix go to the front (reused first); requests release their blocks
last-block-first, so a request's tail is evicted before its shared prefix.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class KVCacheBlock:
    """One block of ``block_size`` token slots in every layer's K and V cache."""

    __slots__ = ("block_hash", "block_id", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: bytes | None = None

    def __repr__(self) -> str:
        return f"KVCacheBlock(id={self.block_id}, ref_cnt={self.ref_cnt})"


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, KVCacheBlock] = OrderedDict(
            (b.block_id, b) for b in self.blocks
        )
        self.cached_blocks: dict[bytes, KVCacheBlock] = {}
        self.num_evictions = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by live requests (free-but-cached blocks count as free)."""
        return 1.0 - len(self.free_queue) / self.num_blocks

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Take ``num_blocks`` blocks off the front of the free queue, evicting cached ones."""
        if num_blocks > len(self.free_queue):
            raise ValueError(f"cannot take {num_blocks} blocks, {len(self.free_queue)} are free")
        taken = []
        for _ in range(num_blocks):
            _, block = self.free_queue.popitem(last=False)
            if block.block_hash is not None:
                if self.cached_blocks.get(block.block_hash) is block:
                    del self.cached_blocks[block.block_hash]
                block.block_hash = None
                self.num_evictions += 1
            block.ref_cnt = 1
            taken.append(block)
        return taken

    def get_cached_block(self, block_hash: bytes) -> KVCacheBlock | None:
        return self.cached_blocks.get(block_hash)

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on cache hits, pulling free ones out of the free queue."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self.free_queue[block.block_id]
            block.ref_cnt += 1

    def cache_block(self, block: KVCacheBlock, block_hash: bytes) -> None:
        """Make a full block findable by its hash (first writer wins on duplicates)."""
        if block.block_hash is not None or block_hash in self.cached_blocks:
            return
        block.block_hash = block_hash
        self.cached_blocks[block_hash] = block

    def uncache_block(self, block: KVCacheBlock) -> None:
        """Forget a block's hash (its contents will never be written as promised)."""
        if block.block_hash is not None:
            if self.cached_blocks.get(block.block_hash) is block:
                del self.cached_blocks[block.block_hash]
            block.block_hash = None

    def free_blocks(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference each; blocks nobody holds go to the back of the free queue."""
        for block in blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self.free_queue[block.block_id] = block
                if block.block_hash is None:
                    # Holds nothing reusable: hand it out before any cached block.
                    self.free_queue.move_to_end(block.block_id, last=False)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; only possible when no request holds a block."""
        if len(self.free_queue) != self.num_blocks:
            return False
        for block in self.blocks:
            block.block_hash = None
        self.cached_blocks.clear()
        return True
