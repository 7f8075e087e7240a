"""Small CPU steps run on one thread (engine/worker/cpu_threads.py): a step too small to gain
from a second core does not wake torch's other threads; a large one uses them all, and the
thread count is back to the engine's after every step."""

from __future__ import annotations

import torch

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.worker.cpu_threads import SMALL_STEP_MACS


def test_small_steps_run_on_one_thread_and_large_ones_on_all(tiny_engine_path):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        engine = LLMEngine(
            EngineConfig(model=tiny_engine_path, device="cpu", max_model_len=512, cpu_threads=2)
        )
        seen: list[tuple[int, int]] = []  # (tokens in the forward, threads while it ran)
        model = engine.runner.model
        forward = model.forward

        def spy(input_ids, *args, **kwargs):
            seen.append((input_ids.numel(), torch.get_num_threads()))
            return forward(input_ids, *args, **kwargs)

        model.forward = spy
        per_token = engine.runner.step_threads.macs_per_token
        large = SMALL_STEP_MACS // per_token + 1  # the fewest tokens of a large step
        params = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
        engine.add_request("small", list(range(600, 616)), params)
        engine.add_request("large", [3 + i % 500 for i in range(large)], params)
        while engine.has_unfinished_requests():
            engine.step()
            assert torch.get_num_threads() == 2  # restored after each step
        # The first step computes both prompts (large), then two decodes (small) follow.
        assert seen[0] == (16 + large, 2)
        assert seen[1:] == [(2, 1)]
    finally:
        torch.set_num_threads(before)
