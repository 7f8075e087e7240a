"""How many of the host's cores the engine's CPU steps can have, given what else runs there.

``bin/serve`` runs the API, Redis and the engine on one host, and on a small CPU machine they
share the cores torch's threads would take. torch's parallel regions end with their slowest
thread: a step on two threads, one of them on a core where another process uses a share ``f``,
runs at that thread's pace, about ``2 (1 - f)`` cores of work against one core's on one thread,
and its other thread spins meanwhile on CPU the other process needs. So two threads pay while
the others take less than half a core. Measured through the API on a 2-core VM
(bench/tenant_flood_api.py --fair-only, 2026-11-26, Xeon model 207), while tenant A's burst of
128 requests was being taken in (the API and A's client then use 0.5-1.6 cores, and 0.3-0.5
for the rest of the flood): tenant B's p99 time to first token was 4.5-12.8x its idle value on
two fixed threads and 3.0-4.6x on one, A's flood 67-69k tokens/s on two and 63-69k on one.
This module's choice, alternated with two fixed threads: p99 2.7-5.0x against 3.4-7.0x, at
the same throughput (docs/benchmarks.md).

``HostLoad`` reads, at most every ``SAMPLE_S``, the busy time of the CPUs this process may run on
(/proc/stat) less this process's own CPU time: the cores everything else used since the last
reading. ``threads`` then picks a step's thread count from the cores left, with a band between
going down and coming back up so that a reading near the boundary does not change the count at
every sample. Where there is no /proc/stat or affinity mask (not Linux), nothing is limited.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

# The shortest window a reading covers: /proc/stat counts in ticks of 10 ms, so 0.1 s on two
# cores is 20 ticks, a reading to about a tenth of a core.
SAMPLE_S = 0.1
# One thread fewer once the others take more than DOWN_MARGIN of a core the current count
# needs, one more once they take at most UP_MARGIN of the next thread's. Lower margins (0.5
# and 0.25) kept one thread through the API's 0.3-0.5 core after a burst too: 3% less
# throughput of A's flood, for a tail within these margins' noise (2026-11-26).
DOWN_MARGIN = 0.6
UP_MARGIN = 0.5


def busy_seconds(cpus: frozenset[int], path: str = "/proc/stat") -> float:
    """Seconds the ``cpus`` have spent busy since boot, for every process (steal included:
    a core the hypervisor has taken is not free either)."""
    ticks = 0
    with open(path, "rb") as f:
        for line in f:
            if not line.startswith(b"cpu") or line[3:4] == b" ":  # the all-CPU total
                continue
            name, *fields = line.split()
            if int(name[3:]) not in cpus:
                continue
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
            ticks += user + nice + system + irq + softirq + steal
    return ticks / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """This process's CPU time, all its threads."""
    t = os.times()
    return t.user + t.system


class HostLoad:
    """The cores the host's other processes use (see the module docstring)."""

    def __init__(
        self,
        cpus: frozenset[int] | None = None,
        *,
        busy: Callable[[], float] | None = None,
        own: Callable[[], float] = own_seconds,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cpus = cpus if cpus is not None else frozenset(os.sched_getaffinity(0))
        self._busy = busy or (lambda: busy_seconds(self.cpus))
        self._own, self._clock = own, clock
        self._last: tuple[float, float, float] | None = None  # (clock, busy, own)
        self._others: float | None = None  # cores used by other processes, last window

    @classmethod
    def of_this_host(cls) -> HostLoad | None:
        """None where /proc/stat or the affinity mask cannot be read."""
        try:
            load = cls()
            load.others()
        except (AttributeError, OSError, ValueError):  # no os.sched_getaffinity, no /proc
            return None
        return load

    def others(self) -> float | None:
        """Cores the other processes used over the last window of at least ``SAMPLE_S``
        (None before the first window ends)."""
        now = self._clock()
        if self._last is not None and now - self._last[0] < SAMPLE_S:
            return self._others
        busy, own = self._busy(), self._own()
        if self._last is not None:
            then, busy_then, own_then = self._last
            self._others = max(0.0, ((busy - busy_then) - (own - own_then)) / (now - then))
        self._last = (now, busy, own)
        return self._others

    def threads(self, wanted: int, current: int) -> int:
        """The thread count for the next step: at most ``wanted``, starting from ``current``
        (``wanted`` if the host's load cannot be read now: a step never fails for it)."""
        try:
            others = self.others()
        except (OSError, ValueError):
            return wanted
        if others is None:
            return wanted
        free = len(self.cpus) - others
        n = min(current, wanted)
        while n > 1 and free < n - DOWN_MARGIN:
            n -= 1
        while n < wanted and free >= n + 1 - UP_MARGIN:
            n += 1
        return n
