"""Block pool and hashing: LRU reuse, ref counts, eviction, salted chained hashes (no model)."""

from __future__ import annotations

import pytest

from engine.adapters import AdapterIdentity
from engine.core.block_hash import ROOT_HASH, extra_keys, hash_block, update_block_hashes
from engine.core.block_pool import BlockPool
from engine.request import Request
from engine.sampling_params import SamplingParams


def test_new_blocks_come_from_the_front_and_freed_cached_blocks_go_to_the_back():
    pool = BlockPool(4)
    a, b = pool.get_new_blocks(2)
    assert (a.block_id, b.block_id) == (0, 1) and a.ref_cnt == 1
    pool.cache_block(a, b"ha")
    pool.free_blocks([a, b])
    # b holds nothing reusable: handed out first; cached a waits at the back (LRU).
    order = [blk.block_id for blk in pool.get_new_blocks(4)]
    assert order == [1, 2, 3, 0]


def test_reusing_a_cached_block_evicts_its_hash():
    pool = BlockPool(1)
    (block,) = pool.get_new_blocks(1)
    pool.cache_block(block, b"h")
    pool.free_blocks([block])
    assert pool.get_cached_block(b"h") is block  # still findable while free
    pool.get_new_blocks(1)
    assert pool.get_cached_block(b"h") is None
    assert pool.num_evictions == 1


def test_touch_takes_a_free_cached_block_out_of_the_free_queue_and_counts_refs():
    pool = BlockPool(2)
    (block,) = pool.get_new_blocks(1)
    pool.cache_block(block, b"h")
    pool.free_blocks([block])
    assert pool.num_free_blocks == 2
    pool.touch([block])
    pool.touch([block])
    assert block.ref_cnt == 2 and pool.num_free_blocks == 1
    pool.free_blocks([block])
    assert pool.num_free_blocks == 1  # one holder left
    pool.free_blocks([block])
    assert pool.num_free_blocks == 2


def test_taking_more_blocks_than_free_is_an_error():
    with pytest.raises(ValueError, match="cannot take 3 blocks"):
        BlockPool(2).get_new_blocks(3)


def _request(tokens, salt=None, adapter=None):
    return Request("r", tokens, SamplingParams(), max_tokens=1, cache_salt=salt, adapter=adapter)


def test_block_hashes_chain_and_cover_only_full_blocks():
    req = _request(list(range(10)))
    update_block_hashes(req, 4)
    assert len(req.block_hashes) == 2  # tokens 8..9 do not fill a block
    extra = extra_keys(None, None)
    first = hash_block(ROOT_HASH, [0, 1, 2, 3], extra)
    assert req.block_hashes == [first, hash_block(first, [4, 5, 6, 7], extra)]
    req.append_output_token(10)
    req.append_output_token(11)
    update_block_hashes(req, 4)
    assert len(req.block_hashes) == 3


def test_same_block_tokens_after_a_different_prefix_hash_differently():
    a, b = _request([1, 2, 3, 4, 9, 9, 9, 9]), _request([5, 6, 7, 8, 9, 9, 9, 9])
    update_block_hashes(a, 4)
    update_block_hashes(b, 4)
    assert a.block_hashes[1] != b.block_hashes[1]


@pytest.mark.parametrize(
    "other",
    [
        {"salt": "tenant-b"},
        {"salt": "tenant-a", "adapter": AdapterIdentity("sql", "abc")},
    ],
)
def test_salt_and_adapter_identity_change_every_block_hash(other):
    tokens = list(range(8))
    base = _request(tokens, salt="tenant-a")
    changed = _request(tokens, salt=other.get("salt"), adapter=other.get("adapter"))
    update_block_hashes(base, 4)
    update_block_hashes(changed, 4)
    assert not set(base.block_hashes) & set(changed.block_hashes)


def test_adapter_checksum_is_part_of_the_identity():
    tokens = list(range(4))
    v1 = _request(tokens, adapter=AdapterIdentity("sql", "v1"))
    v2 = _request(tokens, adapter=AdapterIdentity("sql", "v2"))
    update_block_hashes(v1, 4)
    update_block_hashes(v2, 4)
    assert v1.block_hashes != v2.block_hashes


def test_salt_cannot_be_forged_by_concatenation():
    # A naive "salt|adapter" join would make these equal.
    assert extra_keys("a|b", None) != extra_keys("a", AdapterIdentity("b", ""))
