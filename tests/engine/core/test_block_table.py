"""BlockTableRows: the rows a step's block tables are gathered from match each request's ids."""

from __future__ import annotations

import random

import numpy as np

from engine.core.block_table import BlockTableRows
from engine.worker.step_inputs import _padded


def test_random_allocations_frees_and_truncations_gather_as_the_lists_would():
    """Requests come, grow, give back blocks and go, past the array's first rows and width;
    every gather equals the zero-padded tables built from the same ids as lists."""
    rng = random.Random(0)
    rows = BlockTableRows(num_rows=4, width=8)
    lists: dict[str, list[int]] = {}
    next_id = 1
    for step in range(2000):
        action = rng.random()
        if action < 0.45 or not lists:
            rid = rng.choice([*lists, f"r{step}"] if lists else [f"r{step}"])
            new = list(range(next_id, next_id + rng.randint(1, 5)))
            next_id += len(new)
            lists.setdefault(rid, []).extend(new)
            rows.extend(rid, new)
        elif action < 0.6:
            rid = rng.choice(list(lists))
            keep = rng.randint(0, len(lists[rid]))
            del lists[rid][keep:]
            rows.truncate(rid, keep)
        elif action < 0.75:
            rid = rng.choice(list(lists))
            del lists[rid]
            rows.release(rid)
        held = [rid for rid in lists if lists[rid]]
        if held:
            batch = [rng.choice(held) for _ in range(rng.randint(1, 6))]
            got = rows.gather([rows.row_of[rid] for rid in batch])
            assert np.array_equal(got, _padded([lists[rid] for rid in batch]))
    assert rows.array.shape[0] > 4 and rows.array.shape[1] > 8  # it grew both ways


def test_a_gathered_table_is_a_copy_later_allocations_leave_alone():
    rows = BlockTableRows()
    rows.extend("a", [7, 8])
    table = rows.gather([rows.row_of["a"]])
    rows.extend("a", [9])
    rows.release("a")
    rows.extend("b", [1])  # reuses the freed row
    assert table.tolist() == [[7, 8]]
    assert rows.gather([rows.row_of["b"]]).tolist() == [[1]]
