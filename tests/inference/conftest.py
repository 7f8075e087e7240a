"""The platform up for end-to-end API tests: Redis, an engine, Daphne, a tenant and a key.

Session-scoped and started once: a private Redis (other tests flush the shared one), a file
SQLite database migrated and populated here (pytest-django's test database lives in this
process only), one engine process on the tiny llama checkpoint, and Daphne on a free port.
The pooling engine for embeddings starts only when an embeddings test asks for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.access.admission import finish_pending
from controlplane.usage.events import decode_event, usage_queue_key
from tests.support.api_platform import (
    CHAT_MODEL,
    EMBED_MODEL,
    ENGINE_MAX_NUM_SEQS,
    ENGINE_MAX_QUEUED,
    REDIS_PREFIX,
    Platform,
    populate,
)
from tests.support.platform_services import platform_stack


@pytest.fixture(scope="session")
def platform_env(tmp_path_factory, tiny_llama):
    """The launcher's stack with its services up (Redis, migrated database) and the two
    tenants' API keys; the fixtures below start Daphne and engines on it."""
    with platform_stack(tmp_path_factory.mktemp("platform"), redis_prefix=REDIS_PREFIX) as stack:
        yield stack, populate(stack.env, tiny_llama)


@pytest.fixture(scope="session")
def api_server(platform_env):
    """Daphne serving the project on a free port (no engine yet): its base URL."""
    stack, _keys = platform_env
    return stack.start_daphne(timeout=60)  # stopped with the stack


@pytest.fixture(scope="session")
def api_platform(platform_env, api_server, tiny_llama) -> Platform:
    """Daphne, database, tenant and keys, but no engine: for what needs no generation."""
    stack, keys = platform_env
    return Platform(
        base_url=api_server,
        redis_url=stack.redis_url,
        api_key=keys["acme"],
        limited_key=keys["limited"],
        chat_model=CHAT_MODEL,
        embed_model=EMBED_MODEL,
        checkpoint=Path(tiny_llama),
        env=stack.env,
    )


@pytest.fixture(scope="session")
def platform(platform_env, api_platform, tiny_llama) -> Platform:
    """The whole platform: api_platform plus one engine process serving the tiny llama."""
    stack, _keys = platform_env
    stack.start_engine(  # stopped with the stack
        tiny_llama,
        CHAT_MODEL,
        log=stack.workdir / "engine.log",
        timeout=120,
        # A modest backpressure bound, so that a second replica started by a test gets
        # its share of a burst instead of finding the first engine holding all of it.
        max_queued=ENGINE_MAX_QUEUED,
        max_num_seqs=ENGINE_MAX_NUM_SEQS,
    )
    return api_platform


@pytest.fixture(scope="session")
def pooling_engine(platform_env, api_platform):
    stack, _keys = platform_env
    return stack.start_pooling_engine(EMBED_MODEL, timeout=120).process  # stopped with the stack


@pytest.fixture
def auth(api_platform) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_platform.api_key}"}


@pytest.fixture
def usage_events(redis_client):
    """``await usage_events()``: the usage records queued in Redis so far (emptied per test),
    for use cases run in the test's own process."""

    async def read():
        await finish_pending()
        return [decode_event(raw) for raw in redis_client.lrange(usage_queue_key(), 0, -1)]

    return read
