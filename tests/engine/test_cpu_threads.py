"""Small CPU steps after an idle spell run on one thread (engine/worker/cpu_threads.py): they
do not wake torch's sleeping threads; a large step uses them all, a busy engine's steps keep
them all whatever their size, and the thread count is back to the engine's after every step."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.worker import cpu_threads
from engine.worker.cpu_threads import SMALL_STEP_MACS


@contextmanager
def engine_on_two_threads(path: str, *, fixed: bool) -> Iterator[tuple[LLMEngine, list]]:
    """An engine whose CPU steps may take two threads, and the (tokens, threads) each of its
    forwards ran with; torch's own count is given back afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        engine = LLMEngine(
            EngineConfig(
                model=path,
                device="cpu",
                max_model_len=512,
                cpu_threads=2,
                fixed_cpu_threads=fixed,
            )
        )
        seen: list[tuple[int, int]] = []
        model = engine.runner.model
        forward = model.forward

        def spy(input_ids, *args, **kwargs):
            seen.append((input_ids.numel(), torch.get_num_threads()))
            return forward(input_ids, *args, **kwargs)

        model.forward = spy
        yield engine, seen
    finally:
        torch.set_num_threads(before)


def test_small_steps_after_idle_run_on_one_thread_and_busy_steps_on_all(
    tiny_engine_path, monkeypatch
):
    # The idle gap is widened for the test: on a CI host whose other pytest worker holds the
    # second core, the few milliseconds between two steps of a busy engine (sampling, output,
    # scheduling) can pass the real 5 ms when the engine thread is preempted, and the decodes
    # after the large prompt then read as idle. The rule is the same at any gap.
    gap = 0.25
    monkeypatch.setattr(cpu_threads, "IDLE_GAP_S", gap)
    # Fixed: the count of a large step would follow the host's other work otherwise
    # (tests/engine/test_host_load.py), and pytest's other worker is some of it.
    with engine_on_two_threads(tiny_engine_path, fixed=True) as (engine, seen):
        large = SMALL_STEP_MACS // engine.runner.step_threads.macs_per_token + 1  # fewest tokens
        params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)

        def serve(*requests: tuple[str, list[int]]) -> list[tuple[int, int]]:
            seen.clear()
            time.sleep(2 * gap)  # an idle engine: its other threads asleep
            for request_id, prompt in requests:
                engine.add_request(request_id, prompt, params)
            while engine.has_unfinished_requests():
                engine.step()
                assert torch.get_num_threads() == 2  # restored after each step
            return list(seen)

        # One user's short prompt and its decodes: one thread throughout.
        assert serve(("small", list(range(600, 616)))) == [(16, 1), (1, 1), (1, 1)]
        # A large prompt takes both threads, and the decodes right after it keep them (a busy
        # engine's steps are unchanged).
        prompt = [3 + i % 500 for i in range(large)]
        assert serve(("large", prompt)) == [(large, 2), (1, 2), (1, 2)]


def test_a_small_step_that_starts_a_request_runs_on_one_thread_right_after_a_large_one(
    tiny_engine_path, monkeypatch
):
    # A newcomer's short prompt right after another tenant's large step: on the old rule it
    # took both threads (no idle gap), and at a flood's onset, with both cores taken by the
    # flood's client and Redis, its 16 tokens took 50-130 ms.
    monkeypatch.setattr(cpu_threads, "IDLE_GAP_S", 0.25)
    with engine_on_two_threads(tiny_engine_path, fixed=True) as (engine, seen):
        large = SMALL_STEP_MACS // engine.runner.step_threads.macs_per_token + 1
        params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
        engine.add_request("large", [3 + i % 500 for i in range(large)], params)
        engine.step()
        engine.step()  # the large request's first decode: small, but starts nothing
        engine.add_request("small", list(range(600, 616)), params)
        engine.step()  # the newcomer's prompt beside the large request's next decode
    assert seen == [(large, 2), (1, 2), (17, 1)]
