"""Mid-stream failover: when the engine running a generation dies, finish it on another one.

A survivor that reaps a dead engine sends each of its started requests an error delta marked
``engine_lost`` (engine/service/recovery.py); a started request whose engine goes silent for
the silence timeout ends up here too. Instead of ending the client's stream with that error,
the frontend re-submits what is left of every open sample to the model's request stream:

- the prompt followed by the tokens that sample already delivered, with
  ``resumed_output_tokens`` = their number, so the engine counts them as output (penalties,
  ``min_tokens``, ``max_tokens``, the seeded generator's position: engine/resume.py);
- ``max_tokens`` and ``min_tokens`` less what was delivered (the budget left);
- no prompt logprobs (already sent); everything else, the seed included, unchanged.

Samples resume one by one, each as its own ``n=1`` request whose seed is ``seed + index``
(what the engine gives sample ``index`` of an ``n``-sample request), so a request with ``n>1``
resumes only the samples still open, and each sample's stream goes on where it stopped. The
output processor (detokenizer, stop strings, logprobs, token counts) is the API's and never
restarts; the resumed request's deltas are rewritten to the original sample index, and its
prompt and cached token counts are dropped so usage bills the original prompt once.

What holds afterwards: greedy samples continue token for token as if nothing had happened
(up to floating-point differences between a prefill and the decode steps it replaces, which
on the same hardware and dtype did not change an argmax in our tests); seeded sampled ones do
too, the generator being advanced one draw per delivered token, as long as the new engine runs
the same model on the same kind of device. Unseeded samples continue with fresh randomness.

A request resumes at most ``MAX_RESUMES`` times, and only when a live, non-draining engine of
the model exists or appears within ``LIVE_ENGINE_WAIT_S``; otherwise the error goes to the
client as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import msgspec

from engine import protocol

if TYPE_CHECKING:
    from inference.transport.engine_client import EngineClient
    from inference.transport.output_processor import RequestOutputProcessor

logger = logging.getLogger(__name__)

MAX_RESUMES = 2
LIVE_ENGINE_WAIT_S = 5.0
_POLL_S = 0.25


def resumed_request(
    original: protocol.GenerateRequest, index: int, produced: list[int], attempt: int
) -> protocol.GenerateRequest | None:
    """Sample ``index`` of ``original`` continued after ``produced`` tokens, or None when
    nothing is left to generate."""
    sampling = original.sampling
    done = len(produced)
    max_tokens = sampling.max_tokens
    if max_tokens is not None:
        max_tokens -= done
        if max_tokens <= 0:
            return None
    n = sampling.n
    suffix = f"~{attempt}" if n == 1 else f"~{attempt}.{index}"
    return msgspec.structs.replace(
        original,
        request_id=original.request_id + suffix,
        prompt_token_ids=list(original.prompt_token_ids) + list(produced),
        sampling=msgspec.structs.replace(
            sampling,
            n=1,
            max_tokens=max_tokens,
            min_tokens=max(0, sampling.min_tokens - done),
            seed=None if sampling.seed is None else sampling.seed + index,
            # The prompt's own logprobs come with a sample's first tokens: asked again only
            # when the lost engine sent none (its prompt is then the original's).
            prompt_logprobs=None if done else sampling.prompt_logprobs,
        ),
        resumed_output_tokens=done,
    )


class Failover:
    """One generation's engine requests, what each sample produced, and how to resume them."""

    def __init__(
        self,
        client: EngineClient,
        model: str,
        request: protocol.GenerateRequest,
        *,
        max_resumes: int = MAX_RESUMES,
        wait_s: float = LIVE_ENGINE_WAIT_S,
    ):
        self.client = client
        self.model = model
        self.request = request
        self.max_resumes = max_resumes
        self.wait_s = wait_s
        self.resumes = 0
        n = request.sampling.n
        self.produced: list[list[int]] = [[] for _ in range(n)]
        # Engine request id -> the sample indices it carries (the original: all of them).
        self.routes: dict[str, list[int]] = {request.request_id: list(range(n))}

    @property
    def engine_request_ids(self) -> list[str]:
        return list(self.routes)

    def translate(self, delta: protocol.RequestDelta) -> protocol.RequestDelta | None:
        """The delta as the original request's, or None for one of a replaced request."""
        samples = self.routes.get(delta.request_id)
        if samples is None:
            return None
        if delta.request_id != self.request.request_id and not delta.error:
            # A resumed request has one sample; its prompt is the original's plus output.
            delta = msgspec.structs.replace(
                delta,
                request_id=self.request.request_id,
                index=samples[0],
                num_prompt_tokens=0,
                num_cached_tokens=0,
            )
        if not delta.error and 0 <= delta.index < len(self.produced):
            self.produced[delta.index].extend(delta.new_token_ids)
        return delta

    async def resume(
        self, lost_ids: list[str], outputs: RequestOutputProcessor, queue: asyncio.Queue
    ) -> bool:
        """Re-submit the open samples the engine requests ``lost_ids`` carried; False when
        that cannot be done (the caller reports the error then)."""
        lost_ids = [i for i in lost_ids if i in self.routes]
        if self.resumes >= self.max_resumes or not lost_ids:
            return False
        if not await self._live_engine():
            return False
        self.resumes += 1
        requests = []
        for lost_id in lost_ids:
            self.client.outputs.unroute(lost_id)
            # The lost request may still run on an engine that only went silent.
            self.client.abort_soon(lost_id)
            for index in self.routes.pop(lost_id):
                if outputs.samples[index].finished:
                    continue
                produced = self.produced[index]
                request = resumed_request(self.request, index, produced, self.resumes)
                if request is not None:
                    requests.append((index, request))
        for index, request in requests:
            self.routes[request.request_id] = [index]
            self.client.outputs.route(request.request_id, queue)
        await self.client.submit(self.model, [request for _index, request in requests])
        logger.warning(
            "request %s: engine lost, resumed %d sample(s) (resume %d of %d)",
            self.request.request_id,
            len(requests),
            self.resumes,
            self.max_resumes,
        )
        return True

    async def _live_engine(self) -> bool:
        deadline = time.monotonic() + self.wait_s
        while True:
            if any(not s.draining for s in await self.client.live_engines(self.model)):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)
