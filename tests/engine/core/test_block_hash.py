"""Salt regions in the block hashes: a declared public prefix's whole blocks are shared across
salts, the block holding the boundary and every later one are not (no model)."""

from __future__ import annotations

import pytest

from engine.adapters import AdapterIdentity
from engine.core.block_hash import PublicPrefix, public_prefix_or_none, update_block_hashes
from engine.core.kv_cache_manager import KVCacheManager
from engine.request import Request
from engine.sampling_params import SamplingParams

BLOCK = 4
PROMPT = list(range(100, 126))  # 26 tokens: 6 full blocks and 2 tokens


def hashed(tokens, salt, public=None, adapter=None, rid="r"):
    req = Request(
        rid,
        tokens,
        SamplingParams(),
        max_tokens=4,
        cache_salt=salt,
        adapter=adapter,
        public_prefix=public,
    )
    update_block_hashes(req, BLOCK)
    return req


def num_equal_leading(a: list[bytes], b: list[bytes]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))


@pytest.mark.parametrize(
    ("boundary", "public_blocks"),
    [(12, 3), (13, 3), (15, 3), (16, 4), (3, 0)],
    ids=["on-edge", "one-past-edge", "inside-block", "next-edge", "shorter-than-a-block"],
)
def test_only_blocks_wholly_inside_the_public_prefix_are_shared_across_salts(
    boundary, public_blocks
):
    public = PublicPrefix("shared:p1", boundary)
    alice = hashed(PROMPT, "alice", public).block_hashes
    bob = hashed(PROMPT, "bob", public).block_hashes
    assert len(alice) == len(bob) == 6
    assert num_equal_leading(alice, bob) == public_blocks
    # Past the first differing block, the chain never meets again.
    assert not set(alice[public_blocks:]) & set(bob[public_blocks:])


def test_the_same_salt_shares_the_whole_prompt_with_or_without_a_public_prefix():
    public = PublicPrefix("shared:p1", 13)
    first = hashed(PROMPT, "alice", public).block_hashes
    assert hashed(PROMPT, "alice", public).block_hashes == first
    # Without the prefix (a request that sent its own cache_salt, say) nothing is shared with
    # the public region: the tenant's blocks are its own from the first block on.
    private = hashed(PROMPT, "alice").block_hashes
    assert num_equal_leading(private, first) == 0


def test_a_private_salt_equal_to_a_public_salt_still_never_names_a_public_block():
    public = PublicPrefix("shared:p1", 16)
    with_public = hashed(PROMPT, "alice", public).block_hashes
    impostor = hashed(PROMPT, "shared:p1").block_hashes
    assert not set(impostor) & set(with_public)


def test_public_blocks_differ_by_public_salt_and_by_adapter():
    base = hashed(PROMPT, "alice", PublicPrefix("shared:p1", 16)).block_hashes
    other_version = hashed(PROMPT, "bob", PublicPrefix("shared:p2", 16)).block_hashes
    assert num_equal_leading(base, other_version) == 0
    adapter = AdapterIdentity(name="sql", checksum="abc")
    with_adapter = hashed(PROMPT, "bob", PublicPrefix("shared:p1", 16), adapter).block_hashes
    assert num_equal_leading(base, with_adapter) == 0


def test_blocks_filled_by_output_tokens_stay_private():
    req = hashed(PROMPT[:16], "alice", PublicPrefix("shared:p1", 16))
    other = hashed(PROMPT[:16], "bob", PublicPrefix("shared:p1", 16))
    for token in (1, 2, 3, 4):
        req.append_output_token(token)
        other.append_output_token(token)
    update_block_hashes(req, BLOCK)
    update_block_hashes(other, BLOCK)
    assert req.block_hashes[:4] == other.block_hashes[:4]
    assert req.block_hashes[4] != other.block_hashes[4]


def test_kv_cache_hits_across_tenants_stop_at_the_last_whole_public_block():
    kv = KVCacheManager(num_blocks=32, block_size=BLOCK)
    public = PublicPrefix("shared:p1", 14)  # boundary inside the 4th block
    kv.allocate_slots(hashed(PROMPT, "alice", public, rid="a"), len(PROMPT))
    assert kv.get_computed_blocks(hashed(PROMPT, "alice", public, rid="a2"))[1] == 24
    assert kv.get_computed_blocks(hashed(PROMPT, "bob", public, rid="b"))[1] == 12
    assert kv.get_computed_blocks(hashed(PROMPT, "bob", rid="b2"))[1] == 0


@pytest.mark.parametrize(
    ("salt", "num_tokens"), [("", 16), ("s", 0), ("s", -1), ("s", 2.0), (None, 4)]
)
def test_a_malformed_public_prefix_is_refused(salt, num_tokens):
    with pytest.raises(ValueError):
        PublicPrefix(salt, num_tokens)


def test_message_fields_become_a_public_prefix_only_when_set():
    assert public_prefix_or_none("", 0) is None
    assert public_prefix_or_none("s", 8) == PublicPrefix("s", 8)
    with pytest.raises(ValueError):
        public_prefix_or_none("", 8)
