"""A step whose kernels are queued on the device and whose sampled tokens are not read yet.

``ModelRunner.launch`` returns one (engine/async_steps.py): the tokens stay on the device,
where the next step's inputs take them, and a copy of them (and of their logprobs, when asked
for) to page-locked host memory is queued behind them with an event; ``read`` waits for that
event alone, so the host learns the tokens without draining what was queued after this step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
from engine.request import Request
from engine.sample.sampler import Draw


@dataclass(slots=True)
class LaunchedStep:
    sched_out: SchedulerOutput
    sample_requests: list[Request]  # one per row of token_ids
    draw: Draw | None  # None when no request of the step samples
    prompt_logprobs: dict[str, list] = field(default_factory=dict)
    # Set from the above when made: request id -> its row; page-locked copies of the draw's
    # tensors and the event behind them (CUDA only).
    row_of: dict[str, int] = field(init=False)
    _host: list[torch.Tensor] | None = field(init=False, default=None)
    _ready: torch.cuda.Event | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.row_of = {r.request_id: i for i, r in enumerate(self.sample_requests)}
        if self.draw is not None and self.draw.token_ids.is_cuda:
            self._host = []
            for tensor in self.draw.tensors():
                host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
                self._host.append(host.copy_(tensor, non_blocking=True))
            self._ready = torch.cuda.Event()
            self._ready.record()

    @property
    def token_ids(self) -> torch.Tensor:
        """The sampled tokens on the device, one row per sampling request."""
        return self.draw.token_ids

    def read(self) -> ModelRunnerOutput:
        """The step's tokens and logprobs on the host; waits for this step only."""
        result = ModelRunnerOutput(prompt_logprobs=self.prompt_logprobs)
        if self.draw is None:
            return result
        if self._ready is not None:
            self._ready.synchronize()
        sampled = self.draw.read(self._host)
        rows = zip(self.sample_requests, sampled.token_ids, sampled.logprobs, strict=True)
        for r, token, lp in rows:
            result.sampled_token_ids[r.request_id] = token
            if lp is not None:
                result.logprobs[r.request_id] = lp
        return result
