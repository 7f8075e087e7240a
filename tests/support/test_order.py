"""Which tests share a worker under ``--dist loadgroup``, and in which order the groups start.

Groups: tests that share a stack run on one worker, so it starts once a run. A folder whose
conftest has a package-scoped fixture is one group; any other file is its own.

Order: longest group first (the classic longest-processing-time rule). pytest-xdist hands a
free worker the next group in order; by default it orders groups by their number of tests,
which put the fuzzers (two tests, five minutes) and the fleet tests near the end, and one worker
ran them alone for minutes while the other sat idle. The expected seconds per group are in
``tests/group_durations.json``, measured from a full run; a group not in it is counted at
``NEW_TEST_SECONDS`` a test.

Refresh the file after the suite changes much:

    .venv/bin/python -m pytest -n 3 --dist loadgroup --durations=0 -m "not alone" > run.log
    .venv/bin/python -m tests.support.test_order run.log
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
DURATIONS = TESTS / "group_durations.json"
NEW_TEST_SECONDS = 0.5
_DURATION_LINE = re.compile(r"^([0-9.]+)s (?:call|setup|teardown)\s+(\S+)")


def _shares_a_stack(folder: Path) -> bool:
    """Its conftest starts something once for the whole folder (a package-scoped fixture)."""
    conftest = folder / "conftest.py"
    return conftest.is_file() and 'scope="package"' in conftest.read_text()


def group_of(path: Path, cache: dict[Path, str]) -> str:
    """The group of the test file at ``path`` (see the module docstring)."""
    folder = path.parent
    if folder not in cache:
        group = ""
        for parent in [folder, *folder.parents]:
            if parent == TESTS or TESTS not in parent.parents:
                break
            if _shares_a_stack(parent):  # the nearest: its own stack is what it shares
                group = parent.relative_to(TESTS).as_posix()
                break
        cache[folder] = group
    return cache[folder] or path.relative_to(TESTS).as_posix()


def spread_by_group(config) -> bool:
    """Whether this pytest process takes part in a ``--dist loadgroup`` run. The order has to be
    set where the tests are collected, in xdist's workers, and a worker's config says "no" for
    ``dist`` (xdist resets it there) and True for ``loadgroup``: a check of ``dist`` alone kept
    every run in collection order, alphabetical by path."""
    option = config.option
    return getattr(option, "dist", "no") == "loadgroup" or bool(getattr(option, "loadgroup", False))


def longest_first(items: list, groups: list[str]) -> list:
    """``items`` (``groups[i]`` is item i's group) with whole groups in order of expected
    seconds, longest first; inside a group the collection order is kept."""
    known = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    members: dict[str, list] = {}
    for item, group in zip(items, groups, strict=True):
        members.setdefault(group, []).append(item)

    def cost(group: str) -> float:
        return known.get(group, NEW_TEST_SECONDS * len(members[group]))

    ordered = sorted(members, key=cost, reverse=True)  # stable: ties keep collection order
    return [item for group in ordered for item in members[group]]


def record(log: Path) -> dict[str, float]:
    """Seconds per group from a pytest run's ``--durations=0`` report."""
    cache: dict[Path, str] = {}
    totals: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        match = _DURATION_LINE.match(line)
        if match is None:
            continue
        path = TESTS.parent / match[2].split("::", 1)[0]
        group = group_of(path, cache)
        totals[group] = totals.get(group, 0.0) + float(match[1])
    return {group: round(seconds, 1) for group, seconds in sorted(totals.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.test_order PYTEST_LOG", file=sys.stderr)
        return 2
    totals = record(Path(argv[0]))
    if not totals:
        print(f"no --durations=0 lines in {argv[0]}", file=sys.stderr)
        return 1
    DURATIONS.write_text(json.dumps(totals, indent=1) + "\n")
    print(f"{DURATIONS}: {len(totals)} groups, {sum(totals.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
