"""A separate API-like process that records requests: ``python -m ... N TENANT``.

Request i (0-based) has prompt i+1 tokens, generates 2 tokens with one inter-token latency
of 0.02 s, TTFT 0.05 s, e2e 0.5 s, and finishes with "length" when i is odd, else "stop".
All N are recorded concurrently on one event loop, like a busy Daphne process.
"""

from __future__ import annotations

import asyncio
import sys

from controlplane.metrics import record_request


async def main(count: int, tenant: str) -> None:
    await asyncio.gather(
        *(
            record_request(
                model="tiny",
                tenant=tenant,
                finished_reason="length" if i % 2 else "stop",
                prompt_tokens=i + 1,
                generation_tokens=2,
                e2e_latency=0.5,
                time_to_first_token=0.05,
                inter_token_latencies=[0.02],
                queue_time=None,
                prefill_time=None,
                decode_time=None,
                cached_tokens=1,
            )
            for i in range(count)
        )
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
