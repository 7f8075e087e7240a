"""Run an offline engine to completion and collect its tokens per request; random prompts."""

from __future__ import annotations

import random


def run_to_completion(engine, max_steps: int = 10_000) -> dict[tuple[str, int], dict]:
    """Step until idle; per (request id, sample index): tokens, finish reason, deltas."""
    results: dict[tuple[str, int], dict] = {}
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            return results
        for delta in engine.step():
            entry = results.setdefault(
                (delta.request_id, delta.index), {"tokens": [], "deltas": [], "finish": None}
            )
            entry["tokens"].extend(delta.new_token_ids)
            entry["deltas"].append(delta)
            if delta.finished:
                entry["finish"] = delta.finish_reason
    raise AssertionError("engine did not finish")


def random_prompts(count: int, low: int, high: int, seed: int = 0, vocab: int = 1000):
    rng = random.Random(seed)
    return [[rng.randrange(5, vocab) for _ in range(rng.randint(low, high))] for _ in range(count)]


class CountedFusedDecode:
    """A model's FusedDecode (engine.models.fused_decode) that counts the steps it serves, so
    that a test fails on a silent fallback to the per-op loop."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = 0

    def can_run(self, hidden, metadata) -> bool:
        return self.inner.can_run(hidden, metadata)

    def __call__(self, *args):
        self.calls += 1
        return self.inner(*args)
