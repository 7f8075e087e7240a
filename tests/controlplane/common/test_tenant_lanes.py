"""Per-tenant lanes at the API's door (controlplane/common/tenant_lanes.py): one tenant's burst
waits in its own lane, and another tenant's request goes straight through."""

from __future__ import annotations

import asyncio

import pytest

from controlplane.access.lanes import lane_of
from controlplane.common.tenant_lanes import TenantLanes, leave_lane


def test_a_lane_lets_width_requests_in_and_the_rest_wait_in_arrival_order():
    async def main():
        lanes = TenantLanes(width=2, lease_s=60)
        a = [asyncio.create_task(lanes.enter("A")) for _ in range(5)]
        await asyncio.sleep(0.01)
        states = [[t.done() for t in a]]
        # Another tenant's request is not behind A's burst.
        b = await asyncio.wait_for(lanes.enter("B"), timeout=1)
        for i in range(3):
            a[i].result().release()
            await asyncio.sleep(0.01)
            states.append([t.done() for t in a])
        assert b is not None
        return states, lanes

    states, lanes = asyncio.run(main())
    assert states == [
        [True, True, False, False, False],
        [True, True, True, False, False],
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]
    assert lanes.queued("A") == 0


def test_a_place_comes_free_on_release_once_and_at_the_lease_end():
    async def main():
        lanes = TenantLanes(width=1, lease_s=0.3)
        first = await lanes.enter("A")
        second = asyncio.create_task(lanes.enter("A"))
        await asyncio.sleep(0.01)
        waited_while_held = not second.done()
        await asyncio.sleep(0.35)  # the first one's lease ends: the second goes on
        let_in_by_lease = second.done()
        first.release()  # late, and twice: gives nothing away that is not its own
        first.release()
        third = asyncio.create_task(lanes.enter("A"))
        await asyncio.sleep(0.01)
        third_waits = not third.done()  # the second one still holds the only place
        (await second).release()
        await asyncio.sleep(0.01)
        return waited_while_held, let_in_by_lease, third_waits, third.done()

    held, by_lease, third_waits, third_in = asyncio.run(main())
    assert held and by_lease and third_waits and third_in


def test_a_waiter_that_goes_away_takes_no_place_with_it():
    async def main():
        lanes = TenantLanes(width=1, lease_s=60)
        first = await lanes.enter("A")
        gone = asyncio.create_task(lanes.enter("A"))
        last = asyncio.create_task(lanes.enter("A"))
        await asyncio.sleep(0.01)
        gone.cancel()  # its client disconnected while it waited
        await asyncio.sleep(0.01)
        first.release()
        await asyncio.sleep(0.01)
        slot = last.result()
        slot.release()
        # Every place given back: the lane's only place is free at once.
        await asyncio.wait_for(lanes.enter("A"), timeout=0.5)
        return lanes.queued("A")

    assert asyncio.run(main()) == 0


def test_leave_lane_releases_the_running_requests_place():
    async def main():
        lanes = TenantLanes(width=1, lease_s=60)

        async def request():
            await lanes.enter("A")
            leave_lane()  # as the engine client does once its request is submitted
            await asyncio.sleep(0.05)  # still running, waiting on the engine

        first = asyncio.create_task(request())
        await asyncio.sleep(0.01)
        second = asyncio.create_task(lanes.enter("A"))
        await asyncio.sleep(0.01)
        admitted = second.done()
        await first
        return admitted

    assert asyncio.run(main())
    leave_lane()  # outside any request: nothing to release, no error


def _scope(**headers) -> dict:
    return {
        "type": "http",
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
        "client": ("10.0.0.7", 5000),
    }


@pytest.mark.django_db
def test_lanes_are_tenants_when_the_key_is_known_here(monkeypatch):
    from controlplane.access import keycache
    from controlplane.tenants.key_secrets import prefix_of
    from controlplane.tenants.services import api_key_create, tenant_create

    tenant = tenant_create(name="lanes")
    one, two = api_key_create(tenant=tenant).secret, api_key_create(tenant=tenant).secret
    unknown = one[:-4] + "zzzz"
    # Not yet in this process's key cache: each key is its own lane.
    assert lane_of(_scope(authorization=f"Bearer {one}")) == ("key", prefix_of(one))
    for secret in (one, two):
        keycache.key_cache.get(prefix_of(secret))
    assert lane_of(_scope(authorization=f"Bearer {one}")) == ("tenant", tenant.id)
    assert lane_of(_scope(x_api_key=two)) == ("tenant", tenant.id)  # the Messages API's header
    assert lane_of(_scope(authorization=f"Bearer {unknown}"))[0] in ("key", "tenant")
    assert lane_of(_scope()) == ("address", "10.0.0.7")
    assert lane_of(_scope(authorization="Basic abc")) == ("address", "10.0.0.7")


def test_the_api_handler_keeps_a_burst_in_its_lane_until_each_response_starts():
    from controlplane.common.api_middleware import ApiASGIHandler

    async def main():
        handler = ApiASGIHandler()
        handler.lanes = TenantLanes(width=1, lease_s=60)
        entered: list[str] = []
        respond = asyncio.Event()

        async def handle(scope, receive, send):  # stands in for Django's handling
            entered.append(scope["client"][0])
            await respond.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await asyncio.sleep(0.05)  # still streaming its body: out of the lane already
            await send({"type": "http.response.body", "body": b""})

        handler.handle = handle
        sent = []

        async def send(message):
            sent.append(message["type"])

        def call(address):
            scope = {**_scope(), "client": (address, 1)}
            return asyncio.create_task(handler(scope, None, send))

        a = [call("tenant-a") for _ in range(3)]
        await asyncio.sleep(0.02)
        b = call("tenant-b")
        await asyncio.sleep(0.02)
        before = list(entered)
        respond.set()
        await asyncio.sleep(0.02)
        after_first_starts = list(entered)
        await asyncio.gather(*a, b)
        return before, after_first_starts, entered, sent

    before, after, entered, sent = asyncio.run(main())
    assert before == ["tenant-a", "tenant-b"]  # A's second and third wait; B does not
    assert after.count("tenant-a") >= 2  # A's first response started: its next one is in
    assert entered.count("tenant-a") == 3 and sent.count("http.response.start") == 4
