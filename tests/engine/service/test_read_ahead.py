"""The engine's reader bound grows with the frontends sending to its model (fair policy, no
--max-queued), so a tenant's burst spread over many API processes stays within what it reads."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from engine import protocol
from engine.config import EngineConfig, ServiceSettings
from engine.service.read_ahead import ReadAhead

MODEL = "read-ahead"


def _read_ahead(policy: str = "fair", prefix: str = "", **settings) -> ReadAhead:
    config = EngineConfig(model="unused", max_num_seqs=8, scheduling_policy=policy)
    return ReadAhead(config, ServiceSettings(model_name=MODEL, **settings), protocol.Keys(prefix))


@pytest.fixture
def marked(redis_server):
    """``mark(n)``: n frontends sending to MODEL now, as their admission reads mark them."""
    client = redis.Redis.from_url(redis_server.url)
    keys = protocol.Keys(f"ra{uuid.uuid4().hex[:6]}")

    def mark(n: int) -> None:
        client.delete(keys.frontends(MODEL))
        if n:
            client.zadd(keys.frontends(MODEL), {f"f{i}": time.time() for i in range(n)})

    yield client, keys.prefix, mark
    client.close()


def test_the_bound_is_the_queue_plus_the_floor_with_a_few_frontends(marked):
    client, prefix, mark = marked
    read_ahead = _read_ahead(prefix=prefix)
    assert read_ahead.bound == 16 + 256
    for n in (0, 1, 8):
        mark(n)
        read_ahead.refresh(client)
        assert read_ahead.bound == 16 + 256, n


def test_past_eight_frontends_it_holds_four_bursts_of_eight_per_frontend(marked):
    client, prefix, mark = marked
    read_ahead = _read_ahead(prefix=prefix)
    mark(40)  # each keeps 8 of a tenant's requests per engine: 320 deep
    read_ahead.refresh(client)
    assert (read_ahead.frontends, read_ahead.bound) == (40, 16 + 4 * 8 * 40)
    mark(2)  # they left: back to the floor
    read_ahead.refresh(client)
    assert read_ahead.bound == 16 + 256


def test_a_larger_floor_stays(marked):
    client, prefix, mark = marked
    read_ahead = _read_ahead(prefix=prefix, fair_lookahead=2000)
    mark(40)
    read_ahead.refresh(client)
    assert read_ahead.bound == 16 + 2000


@pytest.mark.parametrize(
    ("policy", "settings", "bound"),
    [("fcfs", {}, 16), ("priority", {}, 16), ("fair", {"max_queued": 50}, 50)],
)
def test_fifo_engines_and_an_explicit_bound_do_not_grow(marked, policy, settings, bound):
    client, prefix, mark = marked
    read_ahead = _read_ahead(policy, prefix=prefix, **settings)
    mark(40)
    read_ahead.refresh(client)
    assert read_ahead.bound == bound


def test_redis_unreachable_keeps_the_bound(marked):
    client, prefix, mark = marked
    read_ahead = _read_ahead(prefix=prefix)
    mark(40)
    read_ahead.refresh(client)
    gone = redis.Redis(port=1, socket_connect_timeout=0.2)  # nothing listens on port 1
    read_ahead.refresh(gone)
    assert read_ahead.bound == 16 + 4 * 8 * 40
