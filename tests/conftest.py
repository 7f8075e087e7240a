"""Session-wide test harness: a private Redis, tiny checkpoints, the gpu marker.

The suite never relies on a server started by hand: Redis is started here on a free port
and every Django setting that points at Redis is redirected to it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controlplane.launcher.redis_server import RedisServer
from tests.support.checkpoints import CheckpointCache, make_cross_encoder
from tests.support.test_order import group_of, longest_first, spread_by_group
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


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hashing():
    """Passwords the tests' own process sets are hashed with MD5: Django's default PBKDF2 costs
    0.23 s of CPU a hash and again a check, paid by every test that makes a user. Hashes made
    elsewhere (manage.py, the platforms' processes, on Django's default) still check here."""
    try:
        from django.conf import settings
        from django.test import override_settings
    except ImportError:  # pragma: no cover - engine-only environments
        yield
        return
    if not settings.configured:
        yield
        return
    md5 = "django.contrib.auth.hashers.MD5PasswordHasher"
    with override_settings(PASSWORD_HASHERS=[md5, *settings.PASSWORD_HASHERS]):
        yield


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
    from controlplane.access.keycache import key_cache
    from controlplane.catalog.cache import catalog_cache

    return [catalog_cache, key_cache]


@pytest.fixture
def redis_client(redis_server):
    """A client on the session's Redis, emptied before each test that uses it."""
    import redis

    # Tests block on replies (BLPOP) for up to 20 s: redis-py 8 would stop reading at 5 s.
    client = redis.Redis.from_url(redis_server.url, socket_timeout=30)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> CheckpointCache:
    """``checkpoints.get(arch, size)``: a tiny random-weight HF checkpoint, made once a session."""
    return CheckpointCache(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture(scope="session")
def run_shared_dir(tmp_path_factory) -> Path:
    """A folder every worker process of this test run shares (pytest-xdist gives each worker
    its own temporary root, inside the run's): for what is made once per run."""
    root = tmp_path_factory.getbasetemp()
    shared = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    return shared / "shared"


@pytest.fixture(scope="session")
def smollm2(run_shared_dir) -> tuple[Path, list[str]]:
    """The real SmolLM2-135M-Instruct, converted from its GGUF once per test run (10-20 s)
    whichever worker asks first, and the progress lines the conversion printed. Tests that
    need real weights share it."""
    from tests.support.smollm2 import converted_smollm2

    return converted_smollm2(run_shared_dir / "gguf")


@pytest.fixture(scope="session")
def tiny_llama(checkpoints):
    return checkpoints.get("llama")


@pytest.fixture(scope="session")
def thinking_qwen3(checkpoints, tmp_path_factory) -> Path:
    """The tiny random Qwen3 with a Qwen3-style thinking chat template (tests/support/
    qwen3_thinking_template.jinja)."""
    from tests.support.checkpoints import with_thinking_template

    dest = tmp_path_factory.mktemp("thinking-qwen3") / "checkpoint"
    return with_thinking_template(checkpoints.get("qwen3"), dest)


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    """A tiny random-weight BertForSequenceClassification reranker (one label)."""
    return make_cross_encoder(tmp_path_factory.mktemp("cross-encoder") / "checkpoint")


TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # For bin/test's `--dist loadgroup` (pytest-xdist): which tests must share a worker, and
    # the longest groups first (tests/support/test_order.py).
    cache: dict[Path, str] = {}
    groups = [group_of(Path(item.path), cache) for item in items]
    for item, group in zip(items, groups, strict=True):
        item.add_marker(pytest.mark.xdist_group(group))
    if spread_by_group(config):
        items[:] = longest_first(items, groups)
    _skip_gpu_tests_without_cuda(items)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` that keeps each group on one worker under pytest 9 too, and hands
    out groups in collection order (longest first, above) rather than by their test count.

    xdist's own loadgroup tells groups apart by a suffix it writes into each item's node id,
    which pytest 9 no longer reads back: every test became a group of its own, so each stack
    and each module fixture started once per worker instead of once a run. This scheduler
    finds a test's group from its path instead, by the same rule as the markers above."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False
    cache: dict[Path, str] = {}

    class StackGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0].split("@", 1)[0]
            return group_of(TESTS.parent / path, cache)

    return StackGroupScheduling(config, log)


def _skip_gpu_tests_without_cuda(items) -> None:
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
