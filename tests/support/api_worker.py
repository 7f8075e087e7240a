"""A stand-in API process for cross-process tests: JSON commands on stdin, answers on stdout.

It runs the real access policy (controlplane.access.principals and admission) with its own per-process key cache, against the
database and Redis named by DATABASE_URL and REDIS_URL.

Commands: {"op": "auth", "key": ...} -> {"status": 200|401|403, ...}
          {"op": "burst", "key": ..., "n": N, "ready": KEY, "go": KEY}: authenticate, mark ready,
          wait until Redis holds ``go``, then admit N requests at once; -> {"results": [...]}
"""

import asyncio
import json
import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django.setup()

from controlplane.access import admission as admission_policy  # noqa: E402
from controlplane.access import principals as access  # noqa: E402
from controlplane.common.redis_clients import async_redis  # noqa: E402
from inference import credentials  # noqa: E402


async def _auth(cmd):
    try:
        principal = await credentials.authenticate(f"Bearer {cmd['key']}", endpoint="completions")
    except access.AccessError as error:
        return {"status": error.status, "body": error.body()}
    return {"status": 200, "tenant": principal.tenant_slug}


async def _one(principal):
    try:
        admission = await admission_policy.admit(
            principal, model="tiny", prompt_tokens=5, max_tokens=5
        )
    except access.AccessError as error:
        return {"status": error.status, "body": error.body(), "headers": error.headers}
    return {"status": 200, "headers": admission.headers}


async def _burst(cmd):
    principal = await credentials.authenticate(f"Bearer {cmd['key']}", endpoint="completions")
    redis = async_redis()
    await redis.incr(cmd["ready"])
    while not await redis.exists(cmd["go"]):
        await asyncio.sleep(0.002)
    return {"results": await asyncio.gather(*(_one(principal) for _ in range(cmd["n"])))}


def main() -> None:
    handlers = {"auth": _auth, "burst": _burst}
    for line in sys.stdin:
        cmd = json.loads(line)
        print(json.dumps(asyncio.run(handlers[cmd["op"]](cmd))), flush=True)


if __name__ == "__main__":
    main()
