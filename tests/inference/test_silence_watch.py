"""inference/transport/silence_watch.py: a request hears that its engine went silent only after
a whole timeout without output while it waited, never earlier, and an idle process keeps no
watch running."""

from __future__ import annotations

import asyncio
import time

from inference.transport.silence_watch import SILENT, TICKS, SilenceWatch


def _drain(queue) -> list:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


async def test_a_waiting_request_is_told_only_after_a_whole_timeout_without_output():
    watch = SilenceWatch(timeout=8.0)
    queue = watch.queue()
    queue.waiting = True  # as while ``next`` awaits
    for now in range(8):  # the first look starts the count at 0.0
        watch.look(float(now))
        assert queue.empty(), now
    watch.look(8.0)
    assert _drain(queue) == [SILENT]
    watch.close()


async def test_silence_is_counted_from_the_first_look_that_finds_it_waiting():
    watch = SilenceWatch(timeout=4.0)
    queue = watch.queue()
    watch.look(0.0)  # busy elsewhere (sending to a slow client): no count
    queue.waiting = True
    watch.look(1.0)  # waiting now: counts from here
    watch.look(4.5)
    assert queue.empty()  # 3.5 s of waiting seen
    watch.look(5.0)
    assert _drain(queue) == [SILENT]
    watch.close()


async def test_a_request_that_keeps_receiving_output_is_never_told():
    watch = SilenceWatch(timeout=2.0)
    queue = watch.queue()
    queue.waiting = True
    for now in range(20):
        queue.put_nowait(f"delta {now}")
        queue.get_nowait()  # taken at once; the reader waits again
        watch.look(float(now))
    assert queue.empty()
    watch.close()


async def test_after_being_told_a_request_waits_a_whole_timeout_again():
    watch = SilenceWatch(timeout=2.0)
    queue = watch.queue()
    queue.waiting = True
    for now in (0.0, 1.0, 2.0):
        watch.look(now)
    assert _drain(queue) == [SILENT]
    for now in (3.0, 4.0):  # the reader asked the engine's status and waits again
        watch.look(now)
    assert queue.empty()
    watch.look(5.0)
    assert _drain(queue) == [SILENT]
    watch.close()


async def test_next_hands_silent_after_the_timeout_and_deltas_before_it():
    watch = SilenceWatch(timeout=0.2)
    queue = watch.queue()
    asyncio.get_running_loop().call_later(0.05, queue.put_nowait, "delta")
    assert await watch.next(queue) == "delta"
    began = time.monotonic()
    assert await watch.next(queue) is SILENT
    waited = time.monotonic() - began
    assert 0.2 <= waited < 0.2 + 3 * 0.2 / TICKS + 0.2  # a tick late at most, plus scheduling
    watch.close()


async def test_the_watch_stops_once_no_request_is_in_flight_and_starts_again_for_the_next():
    watch = SilenceWatch(timeout=0.08)
    first = watch.queue()
    task = watch._task
    watch.forget(first)
    await asyncio.sleep(0.08 / TICKS * 3)
    assert task.done()  # an idle process wakes for nothing
    second = watch.queue()
    assert watch._task is not task and not watch._task.done()
    assert await watch.next(second) is SILENT
    watch.close()
