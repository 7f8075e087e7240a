"""Session-wide test harness: a private Redis, tiny checkpoints, the gpu marker.

The suite never relies on a server started by hand: Redis is started here on a free port
and every Django setting that points at Redis is redirected to it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controlplane.core.redis_server import RedisServer
from tests.support.checkpoints import CheckpointCache
from tests.support.triton_mode import import_triton_for_the_interpreter

# Engines the tests start keep a 1 GiB CPU KV cache (the automatic size, a tenth of available
# memory up to 4 GiB, is resident from the start, and CI runs several engines at once).
# tests/engine/test_kv_cache_budget.py covers the automatic size.
os.environ.setdefault("PLATFORM_CPU_KVCACHE_SPACE", "1")

# Before any test module can import triton: without a GPU its kernels run in the interpreter.
import_triton_for_the_interpreter()


@pytest.fixture(scope="session", autouse=True)
def redis_server(tmp_path_factory):
    """A real redis-server for the whole session; REDIS_URL points at it."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    previous = os.environ.get("REDIS_URL")
    os.environ["REDIS_URL"] = server.url
    _point_django_at(server.url)
    yield server
    server.stop()
    if previous is None:
        os.environ.pop("REDIS_URL", None)
    else:
        os.environ["REDIS_URL"] = previous


def _point_django_at(url: str) -> None:
    try:
        from django.conf import settings
    except ImportError:  # pragma: no cover - engine-only environments
        return
    if not settings.configured:
        return
    settings.REDIS_URL = url
    settings.CELERY_BROKER_URL = url
    settings.CELERY_RESULT_BACKEND = url
    settings.CACHES["default"]["LOCATION"] = url
    from asgiref.local import Local
    from django.core.cache import caches

    # Drop cache clients made before this point; new ones read the updated LOCATION.
    caches._connections = Local(caches.thread_critical)


@pytest.fixture(autouse=True)
def _fresh_process_caches():
    """The API key cache and the model catalog are cached per process and invalidated after a
    commit; the test database rolls back instead, so every test starts with both empty."""
    caches = _process_caches()
    for cache in caches:
        cache.invalidate_local()
    yield
    for cache in caches:
        cache.invalidate_local()


def _process_caches() -> list:
    try:
        from django.conf import settings
    except ImportError:  # pragma: no cover - engine-only environments
        return []
    if not settings.configured:
        return []
    from controlplane.deployments.catalog import catalog_cache
    from controlplane.tenants.keycache import key_cache

    return [catalog_cache, key_cache]


@pytest.fixture
def redis_client(redis_server):
    """A client on the session's Redis, emptied before each test that uses it."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> CheckpointCache:
    """``checkpoints.get(arch, size)``: a tiny random-weight HF checkpoint, made once a session."""
    return CheckpointCache(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory) -> tuple[Path, list[str]]:
    """The real SmolLM2-135M-Instruct, converted from its GGUF once per session (about 30 s),
    and the progress lines the conversion printed. Tests that need real weights share it."""
    from engine.gguf_convert import convert_gguf
    from tests.support.smollm2 import smollm2_gguf

    lines: list[str] = []
    out = convert_gguf(
        smollm2_gguf(), tmp_path_factory.mktemp("gguf") / "smollm2", progress=lines.append
    )
    return out, lines


@pytest.fixture(scope="session")
def tiny_llama(checkpoints):
    return checkpoints.get("llama")


def pytest_collection_modifyitems(config, items):
    if not any("gpu" in item.keywords for item in items):
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
