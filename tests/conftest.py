"""Session-wide test harness: a private Redis, tiny checkpoints, the gpu marker.

The suite never relies on a server started by hand: Redis is started here on a free port
and every Django setting that points at Redis is redirected to it.
"""

from __future__ import annotations

import os

import pytest

from controlplane.core.redis_server import RedisServer
from tests.support.checkpoints import CheckpointCache
from tests.support.triton_mode import import_triton_for_the_interpreter

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
