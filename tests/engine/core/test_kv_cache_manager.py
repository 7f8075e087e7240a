"""KV cache manager: allocation limits, prefix hits, ref-counted sharing, freeing (no model)."""

from __future__ import annotations

from engine.core.block_hash import update_block_hashes
from engine.core.kv_cache_manager import KVCacheManager
from engine.request import Request
from engine.sampling_params import SamplingParams


def request(rid, tokens, salt=None):
    req = Request(rid, tokens, SamplingParams(), max_tokens=4, cache_salt=salt)
    update_block_hashes(req, 4)
    return req


def test_allocation_fails_cleanly_when_blocks_run_out():
    kv = KVCacheManager(num_blocks=3, block_size=4)
    a = request("a", list(range(9)))  # 3 blocks
    assert len(kv.allocate_slots(a, 9)) == 3
    b = request("b", list(range(100, 102)))
    assert kv.allocate_slots(b, 2) is None
    assert kv.num_free_blocks == 0 and "b" not in kv.req_to_blocks


def test_hits_are_shared_with_ref_counts_and_survive_the_first_owner():
    kv = KVCacheManager(num_blocks=8, block_size=4)
    a = request("a", list(range(10)))
    kv.allocate_slots(a, 10)
    b = request("b", list(range(10)))
    hits, num_tokens = kv.get_computed_blocks(b)
    assert num_tokens == 8 and [h.block_id for h in hits] == kv.get_block_ids("a")[:2]
    b.num_computed_tokens = 0
    kv.allocate_slots(b, 2, hits)
    assert all(h.ref_cnt == 2 for h in hits)
    assert kv.get_block_ids("b")[:2] == kv.get_block_ids("a")[:2]
    kv.free(a)
    assert all(h.ref_cnt == 1 for h in hits)
    c = request("c", list(range(10)))
    assert kv.get_computed_blocks(c)[1] == 8


def test_free_cached_blocks_count_as_free_but_hits_on_them_are_not_double_counted():
    kv = KVCacheManager(num_blocks=3, block_size=4)
    a = request("a", list(range(9)))
    kv.allocate_slots(a, 9)
    kv.free(a)
    assert kv.num_free_blocks == 3
    b = request("b", list(range(9)))
    hits, _ = kv.get_computed_blocks(b)
    assert len(hits) == 2
    # 2 hits come out of the free queue; b needs 1 more block: exactly fits.
    assert kv.allocate_slots(b, 1, hits) is not None
    assert kv.num_free_blocks == 0


def test_different_salt_never_hits():
    kv = KVCacheManager(num_blocks=8, block_size=4)
    kv.allocate_slots(request("a", list(range(9)), salt="x"), 9)
    assert kv.get_computed_blocks(request("b", list(range(9)), salt="y")) == ([], 0)


def test_blocks_promised_but_never_written_are_dropped_from_the_cache_on_free():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    a = request("a", list(range(12)))
    kv.allocate_slots(a, 12)  # registers all 3 full blocks for this step's forward
    kv.free(a, num_written_tokens=4)  # dropped before the forward: only block 0 was written
    b = request("b", list(range(13)))
    assert kv.get_computed_blocks(b)[1] == 4


def test_no_caching_when_disabled():
    kv = KVCacheManager(num_blocks=8, block_size=4, enable_caching=False)
    kv.allocate_slots(request("a", list(range(9))), 9)
    assert kv.get_computed_blocks(request("b", list(range(9)))) == ([], 0)
