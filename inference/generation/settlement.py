"""What happens once a generation ends, however it ends: limits released, usage queued, metrics.

Only ``Generation.settle`` calls it, once per generation. It runs shielded from cancellation:
SDKs close the connection right after ``data: [DONE]``, which cancels the request task, and the
reservation must still be released and the request still counted.
"""

from __future__ import annotations

import asyncio
import time

from controlplane.access.admission import Admission, finish
from controlplane.metrics import record_request
from inference.generation.plan import GenerationPlan, GenerationStats


def _finished_reason(stats: GenerationStats, status: int) -> str:
    if stats.finish_reason:
        return stats.finish_reason
    return "abort" if status == 499 else "error"


async def _settle(
    admission: Admission, plan: GenerationPlan, stats: GenerationStats, *, status: int
) -> None:
    latency = time.monotonic() - stats.started
    await finish(
        admission,
        prompt_tokens=plan.prompt_tokens,
        completion_tokens=stats.num_completion_tokens,
        cached_tokens=stats.num_cached_tokens,
        status=status,
        finish_reason=stats.finish_reason,
        time_to_first_token=stats.time_to_first_token,
        latency=latency,
        adapter=plan.adapter.name if plan.adapter is not None else None,
    )
    await record_request(
        model=plan.model,
        tenant=plan.tenant,
        finished_reason=_finished_reason(stats, status),
        prompt_tokens=plan.prompt_tokens,
        generation_tokens=stats.num_completion_tokens,
        e2e_latency=latency,
        time_to_first_token=stats.time_to_first_token,
        inter_token_latencies=stats.inter_token_latencies,
        queue_time=stats.queue_time,
        prefill_time=stats.prefill_time,
        decode_time=stats.decode_time,
        cached_tokens=stats.num_cached_tokens,
    )


async def settle_generation(
    admission: Admission, plan: GenerationPlan, stats: GenerationStats, *, status: int
) -> None:
    await asyncio.shield(asyncio.ensure_future(_settle(admission, plan, stats, status=status)))
