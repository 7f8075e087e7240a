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

A small step that starts a request (a newcomer's prompt) runs on one thread even right after
another step: its first token is what it computes. A tenant's one request that reached the
engine with another tenant's flood, a few milliseconds after that tenant's previous flood had
ended, ran its 16 tokens on both threads while the flood's client and Redis took both cores:
50-130 ms for a step of about 2 ms. bench/tenant_fairness.py on the AVX512 EPYC, nine runs
each way alternated (2026-11-28): the tenant's p99 time to first token under the flood was
2.1-25x its idle p50 before (five runs over 5x), 1.9-9.1x with this rule (one); the fair
policy's total throughput against FIFO 0.88-1.10 (six under 0.95) and 0.99-1.15. Not inside a
paused step (step preemption): there a nested step keeps that step's threads, since switching
their count in the middle of it cost the flood around it a few percent in a trial.

Every other step runs on the threads the host's other processes leave it (HostLoad,
engine/worker/host_load.py: one fewer on a 2-core host while the API takes in a burst), unless
the engine was told to keep its count (``EngineConfig.fixed_cpu_threads``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

from engine.worker.host_load import HostLoad

if TYPE_CHECKING:
    from engine.model_config import ModelConfig

# Multiply-accumulates under which a step may run on one thread: about a millisecond of one core.
SMALL_STEP_MACS = 20_000_000
# A pause between steps past which torch's other threads have stopped spinning and sleep.
IDLE_GAP_S = 0.005


class StepThreads:
    """Chooses the thread count of each CPU step (see the module docstring)."""

    def __init__(
        self, macs_per_token: int, threads: int | None = None, host: HostLoad | None = None
    ) -> None:
        self.macs_per_token = max(1, macs_per_token)
        self.threads = threads or torch.get_num_threads()
        self.host = host  # None: every step that is not small takes ``threads``
        self._host_threads = self.threads  # what the host left the last step that asked
        self._last_end = float("-inf")  # time.monotonic() at the end of the previous step
        self._last_single = False  # whether the previous step ran on one thread

    @classmethod
    def for_model(
        cls, config: ModelConfig, device: torch.device, *, share_host: bool = True
    ) -> StepThreads:
        """From the model's shapes (a quantized model computes as many products per token as
        its float weights); on a GPU, a rule that never applies. ``share_host``: steps take
        only the cores other processes leave (HostLoad)."""
        if device.type != "cpu":
            return cls(1, threads=1)
        hidden, head_dim = config.hidden_size, config.head_dim
        heads = 2 * config.num_attention_heads + 2 * config.num_key_value_heads
        per_layer = hidden * head_dim * heads + 3 * hidden * config.intermediate_size
        macs = config.num_hidden_layers * per_layer + config.vocab_size * hidden
        return cls(macs, host=HostLoad.of_this_host() if share_host else None)

    def single(self, num_tokens: int, starts: bool = False) -> bool:
        """Whether a step of ``num_tokens`` starting now runs on one thread (``starts``: it
        starts a request, and is no nested step)."""
        if self.threads <= 1 or num_tokens * self.macs_per_token >= SMALL_STEP_MACS:
            return False
        return starts or self._last_single or time.monotonic() - self._last_end > IDLE_GAP_S

    def count(self, num_tokens: int, starts: bool = False) -> int:
        """Threads for a step of ``num_tokens`` starting now."""
        if self.single(num_tokens, starts):
            return 1
        if self.host is not None:
            self._host_threads = self.host.threads(self.threads, self._host_threads)
            return self._host_threads
        return self.threads

    @contextmanager
    def for_step(self, num_tokens: int, *, starts: bool = False) -> Iterator[None]:
        threads = self.count(num_tokens, starts)
        outer = torch.get_num_threads()  # a nested step (step preemption) gives back its own
        if threads != outer:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            if threads != outer:
                torch.set_num_threads(outer)
            # "Single": on one thread of several, so the others are likely asleep now.
            self._last_single, self._last_end = threads == 1 < self.threads, time.monotonic()
