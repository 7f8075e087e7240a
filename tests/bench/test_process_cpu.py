"""bench/process_cpu.py: the per-process CPU the API benches report."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.process_cpu import ProcessCpu


def test_a_busy_process_is_charged_its_cpu_and_an_idle_one_next_to_nothing():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)  # both past their start-up
        processes = ProcessCpu({"busy": busy.pid, "idle": idle.pid})
        mark = processes.mark()
        time.sleep(1.0)
        used = processes.since(mark)
    finally:
        busy.kill()
        idle.kill()
        busy.wait()
        idle.wait()
    # A spinning process gets a share of a core even among a loaded runner's other processes.
    assert used["busy"] > 0.1
    assert used["idle"] < 0.05


def test_a_process_that_has_gone_is_left_out_not_an_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    processes = ProcessCpu({"gone": child.pid})
    mark = processes.mark()
    child.wait()  # reaped: its /proc entry is gone
    assert processes.mark() == {"gone": None}
    assert processes.since(mark) == {}
