"""Acceptance across API processes: revocation and expiry reach every process within 5 s, and
rate limits hold when two processes admit at once. Real subprocesses, real Redis, a shared
SQLite file, and the management commands an operator would type."""

from __future__ import annotations

import time

import pytest

from tests.support.shared_database import ApiWorker, FileDatabase

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def platform_db(tmp_path_factory, redis_server):
    db = FileDatabase(tmp_path_factory.mktemp("platform") / "db.sqlite3", redis_server.url)
    return db.migrate()


@pytest.fixture(scope="module")
def workers(platform_db):
    pair = [ApiWorker(platform_db), ApiWorker(platform_db)]
    yield pair
    for worker in pair:
        worker.close()


def _until_all_refused(workers, key: str, deadline_s: float) -> float:
    start = time.monotonic()
    pending = set(range(len(workers)))
    while pending:
        for i in list(pending):
            answer = workers[i].call(op="auth", key=key)
            if answer["status"] == 401:
                assert answer["body"]["error"]["code"] == "invalid_api_key"
                pending.discard(i)
        elapsed = time.monotonic() - start
        assert elapsed < deadline_s, f"processes {sorted(pending)} still accept the key"
        time.sleep(0.05)
    return time.monotonic() - start


def test_revoked_key_is_refused_by_every_process_within_5_seconds(platform_db, workers):
    platform_db.manage("create_tenant", "Revokers")
    secret = platform_db.create_key("Revokers", "--name", "doomed")
    for worker in workers:  # both processes now hold the key in their caches
        assert worker.call(op="auth", key=secret) == {"status": 200, "tenant": "revokers"}
    out = platform_db.manage("revoke_api_key", secret[:11]).stdout
    assert "revoked key" in out
    assert _until_all_refused(workers, secret, 5.0) < 5.0


def test_expired_key_is_refused_by_every_process_within_5_seconds(platform_db, workers):
    platform_db.manage("create_tenant", "Expirers")
    secret = platform_db.create_key("Expirers", "--expires-days", str(3 / 86400))
    for worker in workers:
        assert worker.call(op="auth", key=secret)["status"] == 200
    time.sleep(3)
    assert _until_all_refused(workers, secret, 5.0) < 5.0


def test_fifty_requests_over_two_processes_admit_exactly_ten(platform_db, workers, redis_client):
    platform_db.manage("create_tenant", "Limited", "--rpm", "10")
    secret = platform_db.create_key("Limited")
    for worker in workers:
        worker.send(op="burst", key=secret, n=25, ready="test:ready", go="test:go")
    start = time.monotonic()
    while int(redis_client.get("test:ready") or 0) < 2:
        assert time.monotonic() - start < 60
        time.sleep(0.01)
    redis_client.set("test:go", 1)
    results = [r for worker in workers for r in worker.receive()["results"]]

    admitted = [r for r in results if r["status"] == 200]
    refused = [r for r in results if r["status"] == 429]
    assert len(admitted) == 10 and len(refused) == 40
    # The remaining-requests header counts down 9..0 across both processes, each value once.
    remaining = sorted(int(r["headers"]["x-ratelimit-remaining-requests"]) for r in admitted)
    assert remaining == list(range(10))
    for r in refused:
        error = r["body"]["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
        assert int(r["headers"]["retry-after"]) >= 1
        assert r["headers"]["x-ratelimit-limit-requests"] == "10"
