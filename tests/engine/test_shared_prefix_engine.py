"""Shared public prefixes in a real LLMEngine (tiny llama): the declared prefix's whole blocks are
reused across tenants, nothing after the boundary is, and a tenant still reuses its own."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.core.block_hash import PublicPrefix
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from tests.support.engine_runs import random_prompts, run_to_completion

BLOCK = 16
PARAMS = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)


@pytest.fixture(scope="module")
def engine(tiny_engine_path):
    return LLMEngine(
        EngineConfig(
            model=tiny_engine_path, block_size=BLOCK, num_gpu_blocks=256, max_model_len=512
        )
    )


def cached_tokens(engine, request_id, prompt, salt, public):
    engine.add_request(request_id, prompt, PARAMS, cache_salt=salt, public_prefix=public)
    return run_to_completion(engine)[(request_id, 0)]["deltas"][0].num_cached_tokens


@pytest.mark.parametrize("boundary", [96, 100], ids=["on-block-edge", "inside-a-block"])
def test_reuse_across_tenants_stops_at_the_boundary_and_within_a_tenant_does_not(engine, boundary):
    prefix, tail = random_prompts(2, 200, 200, seed=boundary)
    prompt = prefix[:boundary] + tail[:60]  # the same tokens after the boundary, too
    public = PublicPrefix(f"shared:test-{boundary}", boundary)
    assert cached_tokens(engine, f"a1-{boundary}", prompt, "alice", public) == 0
    # The same tenant reuses everything it sent, past the boundary: 9 whole blocks of 10.
    same = cached_tokens(engine, f"a2-{boundary}", prompt, "alice", public)
    assert same == (len(prompt) - 1) // BLOCK * BLOCK > boundary
    # Another tenant with the very same prompt reuses only the whole public blocks: 96 tokens
    # either way (the block holding token 100 is tenant-salted), so exactly 0 past the
    # boundary even though every token after it is the same.
    assert cached_tokens(engine, f"b1-{boundary}", prompt, "bob", public) == 96
    # ... and without the declared prefix (a client that narrowed with its own salt), 0.
    assert cached_tokens(engine, f"c1-{boundary}", prompt, "carol", None) == 0


def test_a_public_prefix_longer_than_the_prompt_is_refused(engine):
    with pytest.raises(ValueError, match="longer than the prompt"):
        engine.add_request("too-long", [5, 6, 7], PARAMS, public_prefix=PublicPrefix("s", 4))
    assert not engine.has_unfinished_requests()
