"""Waiting queues: first-come-first-served, or by priority (lower value first, then arrival).

Preempted requests go back to the front of an FCFS queue (they arrived before anything still
waiting); in the priority queue their original (priority, arrival) key puts them in place.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.request import Request


class FCFSQueue:
    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    def add(self, request: Request) -> None:
        self._queue.append(request)

    def prepend(self, request: Request) -> None:
        self._queue.appendleft(request)

    def peek(self) -> Request:
        return self._queue[0]

    def pop(self) -> Request:
        return self._queue.popleft()

    def remove(self, request: Request) -> None:
        self._queue.remove(request)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)


class PriorityQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._counter = itertools.count()

    def add(self, request: Request) -> None:
        key = (request.priority, request.timestamps.arrival or 0.0, next(self._counter), request)
        heapq.heappush(self._heap, key)

    prepend = add

    def peek(self) -> Request:
        return self._heap[0][3]

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def remove(self, request: Request) -> None:
        self._heap = [item for item in self._heap if item[3] is not request]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (item[3] for item in sorted(self._heap))


def make_queue(policy: str) -> FCFSQueue | PriorityQueue:
    if policy == "priority":
        return PriorityQueue()
    return FCFSQueue()


def lowest_ranked(running: list[Request], policy: str) -> Request:
    """The running request to preempt first: the latest admitted (FCFS), or the one of the
    lowest priority, then the latest arrival (priority)."""
    if policy == "priority":
        return max(running, key=lambda r: (r.priority, r.timestamps.arrival or 0.0))
    return running[-1]
