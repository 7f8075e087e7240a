"""Finished requests for usage tests: settled as the API settles them (admitted under the
key's limits, then finished: usage queued in Redis for the flush), or as the usage event an
API process would queue."""

from __future__ import annotations

import time
from typing import Any

from controlplane.access import admission as admission_policy
from controlplane.usage.events import UsageEvent, new_event_id
from inference import credentials


def usage_event(**fields: Any) -> UsageEvent:
    """A finished request's usage event: a playground session's 3 + 1 tokens on model "m",
    finished now, unless ``fields`` say otherwise."""
    defaults: dict[str, Any] = {
        "finished_at": time.time(),
        "request_id": new_event_id()[:12],
        "tenant_id": 0,
        "key_id": 0,
        "key_prefix": "session",
        "model": "m",
        "adapter": "",
        "prompt_tokens": 3,
        "completion_tokens": 1,
        "cached_tokens": 0,
        "time_to_first_token": None,
        "latency": 0.1,
        "status": 200,
        "finish_reason": "stop",
        "event_id": new_event_id(),
    }
    return UsageEvent(**{**defaults, **fields})


def key_usage_event(key, **fields: Any) -> UsageEvent:
    """``usage_event`` of an API key (its tenant, id and prefix)."""
    return usage_event(tenant_id=key.tenant_id, key_id=key.pk, key_prefix=key.prefix, **fields)


async def finish_request(
    secret: str,
    *,
    prompt: int,
    completion: int,
    cached: int | None = None,
    status: int = 200,
    adapter: str | None = None,
    model: str = "tiny",
    end_user: str = "",
) -> None:
    """``cached`` None: half the prompt."""
    principal = await credentials.authenticate(f"Bearer {secret}", endpoint="completions")
    admission = await admission_policy.admit(
        principal, model=model, prompt_tokens=prompt, max_tokens=64, end_user=end_user
    )
    await admission_policy.finish(
        admission,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=prompt // 2 if cached is None else cached,
        status=status,
        finish_reason="length",
        time_to_first_token=0.05,
        latency=0.2,
        adapter=adapter,
        end_user=end_user,
    )
    await admission_policy.finish_pending()
