"""Small CPU steps after an idle spell run on one thread.

A step's parallel regions hand work to torch's other OpenMP threads. Once the engine has
waited for requests, those threads sleep, and waking one can cost more than the step: on a
2-core VM (2026-11-25, AMD EPYC) a 16-token prompt on the tiny llama took 1.8 ms at the median
but 10 ms at p90 and up to 38 ms after 50 ms idle with two threads, against 1.7 ms and at most
2.3 ms on one. Work that small gains nothing from a second core anyway.

So a step whose weight work (scheduled tokens x multiply-accumulates per token) is under
``SMALL_STEP_MACS`` runs on the calling thread alone when the threads are likely asleep: after
``IDLE_GAP_S`` without a step, or right after another such step (one user's decodes after its
prompt stay on one thread). Back-to-back steps of a busy engine keep every thread as before,
whatever their size, so a batch's throughput does not change. A decode of a 135M-parameter
model is over the limit: one stream keeps both cores.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from engine.model_config import ModelConfig

# Multiply-accumulates under which a step may run on one thread: about a millisecond of one core.
SMALL_STEP_MACS = 20_000_000
# A pause between steps past which torch's other threads have stopped spinning and sleep.
IDLE_GAP_S = 0.005


class StepThreads:
    """Chooses the thread count of each CPU step (see the module docstring)."""

    def __init__(self, macs_per_token: int, threads: int | None = None) -> None:
        self.macs_per_token = max(1, macs_per_token)
        self.threads = threads or torch.get_num_threads()
        self._last_end = float("-inf")  # time.monotonic() at the end of the previous step
        self._last_single = False  # whether the previous step ran on one thread

    @classmethod
    def for_model(cls, config: ModelConfig, device: torch.device) -> StepThreads:
        """From the model's shapes (a quantized model computes as many products per token as
        its float weights); on a GPU, a rule that never applies."""
        if device.type != "cpu":
            return cls(1, threads=1)
        hidden, head_dim = config.hidden_size, config.head_dim
        heads = 2 * config.num_attention_heads + 2 * config.num_key_value_heads
        per_layer = hidden * head_dim * heads + 3 * hidden * config.intermediate_size
        return cls(config.num_hidden_layers * per_layer + config.vocab_size * hidden)

    def single(self, num_tokens: int) -> bool:
        """Whether a step of ``num_tokens`` starting now runs on one thread."""
        if self.threads <= 1 or num_tokens * self.macs_per_token >= SMALL_STEP_MACS:
            return False
        return self._last_single or time.monotonic() - self._last_end > IDLE_GAP_S

    @contextmanager
    def for_step(self, num_tokens: int) -> Iterator[None]:
        single = self.single(num_tokens)
        if single:
            torch.set_num_threads(1)
        try:
            yield
        finally:
            if single:
                torch.set_num_threads(self.threads)
            self._last_single, self._last_end = single, time.monotonic()
