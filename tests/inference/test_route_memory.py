"""inference/transport/route_memory.py: what a router sent where lately, on a clock the test
moves."""

from __future__ import annotations

import math

from inference.transport.route_memory import DEMAND_DECAY_S, RECENT_S, RouteMemory

SIZE = 2  # bytes per member: short, readable members


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_longest_recently_sent_prefix_names_its_engine_until_it_is_old():
    clock = Clock()
    memory = RouteMemory(clock=clock)
    memory.remember("e1", b"aabbcc", SIZE, tokens=48)
    memory.remember("e2", b"aabb", SIZE, tokens=32)  # the same first two blocks, later

    assert memory.recently_sent(b"aabbccdd", SIZE) == ("e1", 3)
    assert memory.recently_sent(b"aabbxx", SIZE) == ("e2", 2)
    assert memory.recently_sent(b"xxbbcc", SIZE) == ("e1", 3)  # a chained hash: "cc" says all
    assert memory.recently_sent(b"zz", SIZE) == ("", 0)

    clock.now += RECENT_S + 0.1
    assert memory.recently_sent(b"aabbccdd", SIZE) == ("", 0)
    memory.remember("e3", b"zz", SIZE, tokens=16)  # forgetting happens as it remembers
    assert not {b"aa", b"bb", b"cc"} & set(memory._holder)


def test_demand_adds_up_per_engine_and_fades():
    clock = Clock()
    memory = RouteMemory(clock=clock)
    memory.remember("e1", b"", SIZE, tokens=1000)
    memory.remember("e1", b"", SIZE, tokens=500)
    assert memory.demand("e1") == 1500 and memory.demand("e2") == 0

    clock.now += DEMAND_DECAY_S
    assert math.isclose(memory.demand("e1"), 1500 / math.e)
    memory.remember("e1", b"", SIZE, tokens=100)
    assert math.isclose(memory.demand("e1"), 1500 / math.e + 100)
