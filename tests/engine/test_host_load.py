"""CPU steps take only the cores the host's other processes leave (engine/worker/host_load.py):
one thread fewer while another process holds a core, all of them again once it stops; the
engine's own CPU time never counts against it, and ``fixed_cpu_threads`` turns this off."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from engine.sampling_params import SamplingParams
from engine.worker.cpu_threads import SMALL_STEP_MACS, StepThreads
from engine.worker.host_load import SAMPLE_S, HostLoad, busy_seconds
from tests.engine.test_cpu_threads import engine_on_two_threads

WINDOW = 2 * SAMPLE_S  # long enough for a new reading, float sums of it included


class FakeHost:
    """A 2-core host whose readings the test advances: ``run(seconds, others=, own=)`` passes
    time with the other processes and this one using that many cores."""

    def __init__(self, cores: int = 2) -> None:
        self.now = self.busy = self.own = 0.0
        self.load = HostLoad(
            frozenset(range(cores)),
            busy=lambda: self.busy,
            own=lambda: self.own,
            clock=lambda: self.now,
        )

    def run(self, seconds: float, *, others: float, own: float = 0.0) -> None:
        self.now += seconds
        self.busy += (others + own) * seconds
        self.own += own * seconds


def test_a_core_taken_by_another_process_leaves_the_steps_one_thread_until_it_is_free():
    host = FakeHost()
    threads = host.load.threads(2, 2)
    assert threads == 2  # no window has ended yet: nothing is limited
    counts = []
    for others in (0.1, 0.9, 0.55, 0.55, 0.7, 0.3, 0.55):
        host.run(WINDOW, others=others, own=1.0)
        threads = host.load.threads(2, threads)
        counts.append(threads)
    # Down past 0.6 of a core, up at 0.5 or less; in between the count stays as it was.
    assert counts == [2, 1, 1, 1, 1, 2, 2]


def test_the_engines_own_cpu_time_is_not_counted_as_the_hosts_load():
    host = FakeHost()
    host.load.others()
    host.run(WINDOW, others=0.0, own=2.0)  # this process alone, both cores busy
    assert host.load.others() == pytest.approx(0.0)
    assert host.load.threads(2, 2) == 2


def test_a_reading_covers_the_whole_time_since_the_last_one():
    host = FakeHost()
    host.load.others()
    host.run(WINDOW, others=1.0)
    assert host.load.others() == pytest.approx(1.0)
    host.run(WINDOW / 4, others=0.0)  # too soon to read again: the last reading stands
    assert host.load.others() == pytest.approx(1.0)
    host.run(WINDOW * 3 / 4, others=1.0)
    assert host.load.others() == pytest.approx(0.75)


def test_on_a_larger_host_the_count_follows_the_cores_left():
    host = FakeHost(cores=8)
    host.load.others()
    host.run(WINDOW, others=5.0)
    assert host.load.threads(8, 8) == 3
    assert host.load.threads(4, 4) == 3
    host.run(WINDOW, others=0.0)
    assert host.load.threads(4, 3) == 4  # never more than the engine's own count


def test_a_process_burning_a_core_shows_in_the_real_reading():
    load = HostLoad()
    assert busy_seconds(load.cpus) > 0
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # the burner started
        load.others()
        time.sleep(0.5)
        # At least most of a core (more where the host runs other work too).
        assert load.others() >= 0.7
    finally:
        burner.kill()
        burner.wait()


def test_a_nested_step_gives_back_the_outer_steps_count():
    host = FakeHost()
    steps = StepThreads(macs_per_token=SMALL_STEP_MACS, threads=2, host=host.load)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        host.load.others()
        host.run(WINDOW, others=1.0)
        with steps.for_step(64):  # large, and the host leaves one core
            assert torch.get_num_threads() == 1
            with steps.for_step(64):  # a step run at one of its pause points
                assert torch.get_num_threads() == 1
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        host.run(WINDOW, others=0.0)
        with steps.for_step(64):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("fixed", [False, True])
def test_an_engines_large_steps_under_host_load(tiny_engine_path, fixed):
    with engine_on_two_threads(tiny_engine_path, fixed=fixed) as (engine, seen):
        step_threads = engine.runner.step_threads
        assert (step_threads.host is None) == fixed
        host = FakeHost()
        if not fixed:
            step_threads.host = host.load
        large = SMALL_STEP_MACS // step_threads.macs_per_token + 1
        params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
        host.load.others()
        for first, (request_id, others) in enumerate((("loaded", 1.0), ("free", 0.0))):
            host.run(WINDOW, others=others)
            prompt = [3 + (first + i) % 500 for i in range(large)]  # no prefix-cache hit
            engine.add_request(request_id, prompt, params)
            while engine.has_unfinished_requests():
                engine.step()
                assert torch.get_num_threads() == 2  # the engine's count between steps
        assert [threads for _, threads in seen] == ([2, 2] if fixed else [1, 2])


def test_a_reading_that_fails_leaves_the_step_its_threads():
    def unreadable() -> float:
        raise OSError("no /proc here")

    load = HostLoad(frozenset({0, 1}), busy=unreadable)
    assert load.threads(2, 1) == 2
