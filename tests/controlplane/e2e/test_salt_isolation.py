"""Acceptance 3: the prefix cache is isolated per tenant by the server-side salt, end to end
(openai SDK -> Daphne -> Redis -> engine), and a client's cache_salt cannot cross tenants."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from tests.support.live_platform import MODEL

pytestmark = pytest.mark.slow

# Long enough to fill many KV blocks whatever the engine's block size.
PROMPT = " ".join(
    f"The {word} report for quarter {i} is ready."
    for i, word in enumerate(
        ["annual", "weekly", "sales", "audit", "budget", "travel", "hiring", "safety"] * 2
    )
)


def _client(platform, secret):
    import openai

    return openai.OpenAI(base_url=f"{platform.base_url}/v1", api_key=secret, max_retries=0)


def _cached(client, **extra) -> int:
    completion = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=1, temperature=0, extra_body=extra or None
    )
    assert completion.usage.prompt_tokens > 64
    details = completion.usage.prompt_tokens_details
    return details.cached_tokens if details else 0


def _stored_salt(platform, slug: str) -> str:
    with sqlite3.connect(platform.db.path) as conn:
        return conn.execute(
            "SELECT cache_salt FROM tenants_tenant WHERE slug = ?", [slug]
        ).fetchone()[0]


def test_tenants_never_share_prefix_cache(live_platform):
    db = live_platform.db
    db.manage("create_tenant", "Salt A")
    db.manage("create_tenant", "Salt B")
    alice = _client(live_platform, db.create_key("Salt A"))
    bob = _client(live_platform, db.create_key("Salt B"))

    assert _cached(alice) == 0
    assert _cached(alice) > 0  # A's repeat hits A's cache

    assert _cached(bob) == 0  # the same prompt from B finds nothing
    a_salt = _stored_salt(live_platform, "salt-a")
    # Even knowing A's stored salt, or the salt the engine actually sees for A, B gets nothing.
    assert _cached(bob, cache_salt=a_salt) == 0
    assert _cached(bob, cache_salt=hashlib.sha256(a_salt.encode()).hexdigest()) == 0

    # A client salt narrows sharing inside A: a new salt starts cold, then hits its own cache.
    assert _cached(alice, cache_salt="team-1") == 0
    assert _cached(alice, cache_salt="team-1") > 0
