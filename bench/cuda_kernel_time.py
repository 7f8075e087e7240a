"""Where the GPU's time goes in chosen windows of an offline engine run: torch.profiler's CUDA
activity (kernels replayed from CUDA graphs included) summed by kernel, for
``bench/gpu_throughput.py --cuda-profile``.

Each window is ``(first step, steps)`` of ``LLM.generate``'s loop. The report per window: the
requests still unfinished when it starts, the wall time a step, the GPU's busy time a step (the
sum of every kernel's and copy's time, so overlap between streams would count twice), and the
kernels that took the most of it. cProfile (``--profile``) says where the host's time goes;
this says whether the GPU waited for the host and, where it did not, which kernels to make
faster.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# Kernel names (Triton's, cuBLAS's) run long; the table keeps their start.
NAME_WIDTH = 70


@dataclass
class Window:
    first_step: int
    steps: int
    unfinished: int = 0
    wall_s: float = 0.0
    kernels: list[tuple[str, int, float]] = field(default_factory=list)  # name, calls, seconds

    def report(self, top: int = 20) -> str:
        busy = sum(seconds for _, _, seconds in self.kernels)
        per_step = 1e3 / self.steps
        lines = [
            f"steps {self.first_step}-{self.first_step + self.steps - 1}: {self.unfinished} "
            f"requests unfinished at the start; wall {self.wall_s * per_step:.3f} ms a step, "
            f"GPU busy {busy * per_step:.3f} ms a step ({busy / self.wall_s:.0%} of the wall)",
            f"  {'kernel':<{NAME_WIDTH}} {'calls/step':>10} {'us/call':>8} {'ms/step':>8} "
            f"{'share':>6}",
        ]
        if busy == 0:
            return lines[0] + "\n  (the profiler recorded no GPU activity)"
        for name, calls, seconds in sorted(self.kernels, key=lambda k: -k[2])[:top]:
            lines.append(
                f"  {name[:NAME_WIDTH]:<{NAME_WIDTH}} {calls / self.steps:>10.1f} "
                f"{seconds / calls * 1e6:>8.1f} {seconds * per_step:>8.3f} "
                f"{seconds / busy:>6.1%}"
            )
        return "\n".join(lines)


def _device_seconds(event) -> float:
    """An averaged event's own time on the GPU, under either of torch's attribute names."""
    micros = getattr(event, "self_device_time_total", None)
    if micros is None:
        micros = event.self_cuda_time_total
    return micros / 1e6


def profile_windows(llm, run, windows: list[tuple[int, int]]) -> list[Window]:
    """Call ``run()`` (which drives ``llm.generate``) with the CUDA profiler on during each
    window of engine steps; the windows must not overlap."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    engine = llm.llm_engine
    step_method = engine.step
    pending = sorted((Window(first, count) for first, count in windows), key=lambda w: w.first_step)
    done: list[Window] = []
    state = {"step": 0, "profiler": None, "started": 0.0}

    def step():
        window = pending[0] if pending else None
        if window is not None and state["step"] == window.first_step:
            torch.cuda.synchronize()
            window.unfinished = engine.scheduler.num_unfinished
            profiler = profile(activities=[ProfilerActivity.CUDA])
            profiler.__enter__()
            state["profiler"] = profiler
            state["started"] = time.perf_counter()
        result = step_method()
        state["step"] += 1
        if state["profiler"] is not None and state["step"] == window.first_step + window.steps:
            torch.cuda.synchronize()
            window.wall_s = time.perf_counter() - state["started"]
            profiler, state["profiler"] = state["profiler"], None
            profiler.__exit__(None, None, None)
            window.kernels = [
                (e.key, e.count, _device_seconds(e))
                for e in profiler.key_averages()
                if _device_seconds(e) > 0
            ]
            done.append(pending.pop(0))
        return result

    engine.step = step
    try:
        run()
    finally:
        del engine.step  # the instance attribute; the class's method shows again
        if state["profiler"] is not None:
            state["profiler"].__exit__(None, None, None)
    return done
