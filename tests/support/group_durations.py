"""How long each xdist group took, so the scheduler can hand out the longest first.

A group (a folder that shares a stack, else a file: tests/conftest.py's ``_xdist_group``)
runs on one worker from start to end. Handed out in collection order, a long one that comes
late runs on alone while the other workers have finished (a run once idled a core for two
minutes behind the API fuzzer). ``tests/group_durations.json`` holds the seconds each group
took in a full run; a group it does not know counts a second a test.

Refresh it after a change that moves much time (a new stack, a slow test), from a full run:

    TEST_GROUP_DURATIONS_OUT=tests/group_durations.json \\
        .venv/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadgroup -m "not alone"
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

RECORDED = Path(__file__).resolve().parents[1] / "group_durations.json"
UNKNOWN_SECONDS_PER_TEST = 1.0
SMALLEST_KEPT_S = 2.0


def recorded_seconds() -> dict[str, float]:
    try:
        return json.loads(RECORDED.read_text())
    except (OSError, ValueError):
        return {}


def expected_seconds(group: str, tests: int, recorded: dict[str, float]) -> float:
    return recorded.get(group, tests * UNKNOWN_SECONDS_PER_TEST)


class GroupDurationRecorder:
    """Adds up every phase of every test by group, on the controller (the process that sees
    all workers' reports), and writes them where TEST_GROUP_DURATIONS_OUT says."""

    def __init__(self, out: Path, group_of) -> None:
        self.out, self.group_of, self.seconds = out, group_of, Counter()

    @classmethod
    def from_environment(cls, group_of) -> GroupDurationRecorder | None:
        out = os.environ.get("TEST_GROUP_DURATIONS_OUT")
        if not out or os.environ.get("PYTEST_XDIST_WORKER"):
            return None
        return cls(Path(out), group_of)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[self.group_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        kept = {g: round(s) for g, s in self.seconds.most_common() if s >= SMALLEST_KEPT_S}
        self.out.write_text(json.dumps(kept, indent=1) + "\n")
