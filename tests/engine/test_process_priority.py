"""engine/process_priority.py: a process lowers its own CPU priority, every thread of it and
its autogroup; run in child processes, since a process cannot raise its priority back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import ServiceSettings

REPO = Path(__file__).resolve().parents[2]
# Children start at this process's nice value (0 unless the suite itself runs lowered).
INHERITED = os.getpriority(os.PRIO_PROCESS, 0)

# A thread that exists before the call, one started after it, and the calling thread: their
# nice values as the kernel reports them, and the process's autogroup nice (None where the
# kernel has no autogroups or the process's CPU cgroup overrides them).
CHILD = """
import json, os, sys, threading
from engine.process_priority import lower_priority

def nice_of(tid):
    stat = open(f"/proc/self/task/{tid}/stat").read()
    return int(stat.rsplit(")", 1)[1].split()[16])

def wait(ready, done, out):
    out.append(threading.get_native_id()); ready.set(); done.wait()

threads, tids = [], []
for _ in range(2):
    ready, done = threading.Event(), threading.Event()
    t = threading.Thread(target=wait, args=(ready, done, tids), daemon=True)
    threads.append((t, ready, done))
before, _, _ = threads[0]
before.start(); threads[0][1].wait()
changed = lower_priority(int(sys.argv[1]))
after = threads[1][0]
after.start(); threads[1][1].wait()
report = {
    "changed": changed,
    "main": nice_of(threading.get_native_id()),
    "earlier_thread": nice_of(tids[0]),
    "later_thread": nice_of(tids[1]),
}
try:
    # "/autogroup-N nice K"; empty where the process sits in a CPU cgroup, whose shares then
    # apply instead of the autogroup's.
    fields = open("/proc/self/autogroup").read().split()
except OSError:
    fields = []
report["autogroup"] = fields[-1] if fields else None
for _, _, done in threads:
    done.set()
print(json.dumps(report))
"""


def _run(nice: int, *, own_session: bool) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(nice)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=own_session,
        check=True,
    )
    return json.loads(result.stdout)


def test_every_thread_and_the_sessions_autogroup_are_lowered():
    report = _run(7, own_session=True)
    lowered = max(7, INHERITED)
    assert (report["main"], report["earlier_thread"], report["later_thread"]) == (lowered,) * 3
    if INHERITED < 7:
        assert f"nice {INHERITED} -> 7" in report["changed"]
    if report["autogroup"] is not None:  # a kernel with autogroups
        assert report["autogroup"] == "7"
        assert "autogroup nice 7" in report["changed"]


def test_a_process_that_does_not_lead_its_session_leaves_the_autogroup_alone():
    """The session's autogroup is shared with whatever started the process (a shell)."""
    report = _run(3, own_session=False)
    assert report["main"] == max(3, INHERITED)
    assert not any("autogroup" in change for change in report["changed"])
    if report["autogroup"] is not None:
        assert report["autogroup"] != "3"


def test_nice_zero_changes_nothing():
    report = _run(0, own_session=True)
    assert report["changed"] == []
    niceness = (report["main"], report["earlier_thread"], report["later_thread"])
    assert niceness == (INHERITED,) * 3


@pytest.mark.parametrize("nice", [-1, 20])
def test_the_engines_nice_must_be_one_a_process_can_take_for_itself(nice):
    with pytest.raises(ValueError, match="nice must be between 0 and 19"):
        ServiceSettings(model_name="m", nice=nice)
