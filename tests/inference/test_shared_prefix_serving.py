"""Shared prefixes end to end: an operator declares system prompts (the services the admin
and ``manage.py declare_shared_prefix`` call), tenants send chats through the openai SDK, Daphne and Redis to the
tiny llama's engine. The declared prompt is prefilled once for all tenants (usage's
``cached_tokens`` and the engine's prefix-cache counters show it); after its boundary nothing
is reused across tenants, while a tenant still reuses its own prompt."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from engine.text.tokenizer import ChatTokenizer
from engine.tooling.demo.tokenizer import CORPUS_PATH
from tests.support.api_platform import counter_growth, run_django

BLOCK = 16  # the engine's default block size
# The API re-reads the catalog epoch at most every AUTH_EPOCH_CHECK_SECONDS (0.5 s).
EPOCH_CHECK_S = 1.2
# The operator's part, in one Django process: tenants with a key each, and the shared prefixes
# (system prompts) declared for the chat model, as the admin and declare_shared_prefix do.
_SETUP = """
import json, sys
from controlplane.shared_prefixes.services import shared_prefix_create
from controlplane.tenants.services import api_key_create, tenant_create
spec = json.loads(sys.argv[-1])
for name, text in spec["prefixes"].items():
    messages = [{"role": "system", "content": text}]
    shared_prefix_create(name=name, messages=messages, model_names=[spec["model"]])
keys = {n: api_key_create(tenant=tenant_create(name=n)).secret for n in spec["tenants"]}
print(json.dumps(keys))
"""


def system_prompt(tokenizer, *, at_least: int, edge: bool, skip_words: int) -> tuple[str, int]:
    """Corpus text whose rendered system message (the declared prefix) is at least
    ``at_least`` tokens, ending on a block edge or inside a block: (text, its token count)."""
    words = CORPUS_PATH.read_text(encoding="utf-8").split()[skip_words:]

    def rendered(n: int) -> int:
        text = " ".join(words[:n])
        return len(tokenizer.encode(f"<|im_start|>system\n{text}<|im_end|>\n"))

    low, high = 1, at_least  # the fewest words that render to at least ``at_least`` tokens
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if rendered(middle) < at_least else (low, middle)
    n = low
    while (rendered(n) % BLOCK == 0) != edge:
        n += 1
    return " ".join(words[:n]), rendered(n)


@pytest.fixture(scope="module")
def declared(platform):
    """Three declared system prompts (a 2,000-token one; two short ones whose end falls on a
    block edge and inside a block), and 68 tenants: (prompts by name, keys by tenant)."""
    tokenizer = ChatTokenizer(platform.checkpoint)
    prompts = {
        "support-bot": system_prompt(tokenizer, at_least=1990, edge=True, skip_words=0),
        "paired-edge": system_prompt(tokenizer, at_least=150, edge=True, skip_words=4000),
        "paired-inside": system_prompt(tokenizer, at_least=150, edge=False, skip_words=5000),
    }
    tenants = [f"fleet-{i}" for i in range(64)] + ["a-edge", "b-edge", "a-inside", "b-inside"]
    spec = {
        "model": platform.chat_model,
        "prefixes": {name: text for name, (text, _n) in prompts.items()},
        "tenants": tenants,
    }
    keys = run_django(platform.env, _SETUP, spec)
    time.sleep(EPOCH_CHECK_S)
    return prompts, keys


def cached_tokens(platform, key: str, system: str, question: str) -> tuple[int, int]:
    """One chat of the tenant owning ``key``: (prompt tokens, cached prompt tokens)."""
    response = platform.sdk(api_key=key).chat.completions.create(
        model=platform.chat_model,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        max_tokens=1,
        temperature=0,
    )
    return response.usage.prompt_tokens, response.usage.prompt_tokens_details.cached_tokens


def test_64_tenants_sending_one_declared_2000_token_prompt_prefill_it_once(platform, declared):
    prompts, all_keys = declared
    system, num_prefix = prompts["support-bot"]
    assert 1990 <= num_prefix <= 2016
    keys = {name: key for name, key in all_keys.items() if name.startswith("fleet-")}
    before = platform.wait_engine_idle()

    async def one(http: httpx.AsyncClient, key: str, i: int):
        client = platform.async_sdk(api_key=key, http_client=http)
        response = await client.chat.completions.create(
            model=platform.chat_model,
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": f"Ticket {i}: where is order {i * 7}?"},
            ],
            max_tokens=1,
            temperature=0,
        )
        return response.usage

    async def everyone():
        # One connection pool for the 64 tenants' clients (each has its own key).
        async with httpx.AsyncClient(timeout=120) as http:
            return await asyncio.gather(*(one(http, k, i) for i, k in enumerate(keys.values())))

    usages = asyncio.run(everyone())
    cached = sorted(u.prompt_tokens_details.cached_tokens for u in usages)
    # One tenant computed the declared prompt; the 63 others found all of it cached, and no
    # token of their own questions (the block holding the boundary is theirs alone).
    assert cached == [0] + [num_prefix] * 63
    # The engines' own counters agree: 63 x the prefix served from the cache, nothing more.
    after = platform.wait_engine_idle()
    assert counter_growth(before, after, "prefix_cache_hits") == 63 * num_prefix


@pytest.mark.parametrize("edge", [True, False], ids=["on-block-edge", "inside-a-block"])
def test_reuse_after_the_boundary_only_within_a_tenant(platform, declared, edge):
    prompts, keys = declared
    where = "edge" if edge else "inside"
    system, num_prefix = prompts[f"paired-{where}"]
    alice, bob = keys[f"a-{where}"], keys[f"b-{where}"]
    question = "The very same question, asked by both tenants, long enough to fill blocks."

    prompt_tokens, first = cached_tokens(platform, alice, system, question)
    assert first == 0
    # The same tenant again: everything but the last partial block, well past the boundary.
    assert cached_tokens(platform, alice, system, question)[1] == (
        (prompt_tokens - 1) // BLOCK * BLOCK
    )
    assert (prompt_tokens - 1) // BLOCK * BLOCK > num_prefix
    # Another tenant, the very same prompt: only the declared prefix's whole blocks.
    public = num_prefix // BLOCK * BLOCK
    assert cached_tokens(platform, bob, system, question)[1] == public
    assert (public == num_prefix) is edge
    # ... and a client that narrows with its own cache_salt shares nothing, not even those.
    narrowed = platform.sdk(api_key=bob).chat.completions.create(
        model=platform.chat_model,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Other"}],
        max_tokens=1,
        extra_body={"cache_salt": "bobs-own"},
    )
    assert narrowed.usage.prompt_tokens_details.cached_tokens == 0
