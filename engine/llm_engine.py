"""LLMEngine: add requests, call ``step()``, get per-request token deltas. No threads, no I/O.

The service loop (engine/service/) and the offline ``LLM`` both drive this class. A request
with ``n`` samples runs as ``n`` sequences; with prefix caching on, samples 1..n-1 wait until
sample 0 has computed the prompt, then start from its cached blocks instead of recomputing.

LoRA: ``load_adapter(name, path)`` validates a PEFT adapter against the base model, reads it
into host memory and returns its ``AdapterIdentity``; requests pass that identity to
``add_request(..., adapter=...)``. The device slots (``max_loras`` x ``max_lora_rank``) are
allocated on the first load, so engines that never serve an adapter spend no memory on them.
``unload_adapter(name)`` stops new requests of that adapter; running ones finish with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import torch

from engine.adapters import AdapterIdentity
from engine.async_steps import AsyncSteps, drop_finished
from engine.config import EngineConfig
from engine.core.block_hash import PublicPrefix
from engine.core.fair_share import service_class_rank
from engine.core.scheduler import Scheduler
from engine.core.scheduler_output import SchedulerOutput
from engine.core.step_preemption import schedule_inside
from engine.engine_parts import build_lora_manager, build_speculator
from engine.model_config import ModelConfig
from engine.outputs import EngineStats, RequestOutputDelta, take_delta
from engine.request import Request, RequestStatus
from engine.request_checks import check_prompt, check_public_prefix, check_weight
from engine.resume import check_resumed, mark_resumed
from engine.sampling_params import SamplingParams
from engine.structured.manager import StructuredOutputManager
from engine.worker.launched_step import LaunchedStep
from engine.worker.model_runner import ModelRunner

logger = logging.getLogger(__name__)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was requested but no CUDA GPU is available")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device, checkpoint_dtype: str) -> torch.dtype:
    if name != "auto":
        return getattr(torch, name)
    if device.type == "cpu":
        return torch.float32  # CPU matmuls in half precision are slow and inexact
    if checkpoint_dtype in ("bfloat16", "float16"):
        return getattr(torch, checkpoint_dtype)
    return torch.bfloat16


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.model_config = ModelConfig.from_pretrained(config.model, config.max_model_len)
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device, self.model_config.checkpoint_dtype)
        self.lora, self._no_lora_reason = build_lora_manager(config, self.device, self.dtype)
        self.runner = ModelRunner(
            config, self.model_config, device=self.device, dtype=self.dtype, lora=self.lora
        )
        self.scheduler = Scheduler(
            config,
            num_blocks=self.runner.num_blocks,
            max_model_len=self.model_config.max_model_len,
            eos_token_ids=self.model_config.eos_token_ids,
            lora=self.lora,
            speculator=build_speculator(config, self.model_config, self.device),
        )
        self._samples: dict[str, list[Request]] = {}  # user request id -> its live samples
        self._held: dict[str, tuple[Request, list[Request]]] = {}  # sample 0 id -> (it, others)
        self._pending: list[RequestOutputDelta] = []  # aborts, reported by the next step()
        self.structured = StructuredOutputManager(config.model, self.model_config)
        self._in_flight: SchedulerOutput | None = None  # the step the runner is computing
        overlap = config.async_scheduling
        if overlap is None:
            overlap = self.device.type == "cuda"
        self.async_steps = AsyncSteps(self.scheduler, self.runner) if overlap else None

    # -- LoRA adapters ---------------------------------------------------------------------------

    def load_adapter(self, name: str, path: str, checksum: str = "") -> AdapterIdentity:
        """Validate and cache the PEFT adapter at ``path``; return the identity to request it by.

        ``checksum`` (the control plane's record) must match the files when given; without it
        the files' checksum is computed. Raises ValueError with the reason when the adapter does
        not fit the base model (architecture, modules, shapes, rank above ``max_lora_rank``).
        Loading a new version under an existing name keeps the old one for requests using it.
        """
        if not isinstance(name, str) or not name:
            raise ValueError("adapter name must be a non-empty string")
        if self.lora is None:
            raise ValueError(f"this model cannot serve LoRA adapters: {self._no_lora_reason}")
        return self.lora.add_adapter(name, path, checksum)

    def unload_adapter(self, name: str) -> None:
        """Forget every version of ``name``; running requests finish with it, waiting ones end
        as aborted. Unknown names are ignored (unloading is idempotent)."""
        if self.lora is not None:
            self.lora.remove_adapter(name)

    def has_adapter(self, identity: AdapterIdentity) -> bool:
        return self.lora is not None and self.lora.knows(identity)

    def lora_requests_info(self) -> dict[str, object]:
        """What vLLM exports as vllm:lora_requests_info: adapters of running and waiting
        requests, and max_lora."""
        waiting = {r.adapter.name for r in self.scheduler.waiting if r.adapter is not None}
        waiting.update(
            s.adapter.name for _, others in self._held.values() for s in others if s.adapter
        )
        running = {r.adapter.name for r in self.scheduler.running if r.adapter is not None}
        return {
            "running_lora_adapters": sorted(running),
            "waiting_lora_adapters": sorted(waiting),
            "max_lora": self.config.max_loras,
        }

    # -- requests in ---------------------------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        cache_salt: str | None = None,
        adapter: AdapterIdentity | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
        resumed_output_tokens: int = 0,
        public_prefix: PublicPrefix | None = None,
        tenant: str = "",
        weight: float = 1.0,
        service_class: str = "interactive",
    ) -> None:
        """Queue a request; raises ValueError (and changes nothing) if it cannot be served.

        ``resumed_output_tokens``: the last this-many prompt tokens are output an engine that
        died had produced (engine/resume.py). ``public_prefix``: the prompt starts with a
        declared shared prefix, whose whole blocks are cached under its public salt
        (engine/core/block_hash.py). ``tenant`` (an opaque id), ``weight`` and
        ``service_class`` ("interactive" or "batch") place it under the fair policy
        (engine/core/fair_share.py); other policies ignore them."""
        max_tokens = self._validate(request_id, prompt_token_ids, params)
        class_rank = service_class_rank(service_class)
        check_weight(weight)
        check_resumed(len(prompt_token_ids), resumed_output_tokens)
        check_public_prefix(public_prefix, len(prompt_token_ids) - resumed_output_tokens)
        if adapter is not None and not self.has_adapter(adapter):
            raise ValueError(
                f"adapter {getattr(adapter, 'name', adapter)!r} is not loaded in this engine; "
                "call load_adapter first"
            )
        arrival = arrival_time if arrival_time is not None else time.monotonic()
        samples = [
            Request(
                f"{i}:{request_id}",
                prompt_token_ids,
                params,
                max_tokens=max_tokens,
                external_id=request_id,
                index=i,
                cache_salt=cache_salt,
                adapter=adapter,
                priority=priority,
                arrival_time=arrival,
                public_prefix=public_prefix,
                tenant=tenant,
                weight=weight,
                service_class=class_rank,
            )
            for i in range(params.n)
        ]
        self._samples[request_id] = samples
        self.structured.attach(samples)  # compiles off the step path; samples wait for it
        for sample in samples:
            mark_resumed(sample, resumed_output_tokens)
            self.runner.add_request(sample)
        if len(samples) > 1 and self.config.enable_prefix_caching:
            self.scheduler.add_request(samples[0])
            self._held[samples[0].request_id] = (samples[0], samples[1:])
        else:
            for sample in samples:
                self.scheduler.add_request(sample)

    def _validate(self, request_id: str, prompt: list[int], params: SamplingParams) -> int:
        if not isinstance(request_id, str) or not request_id:
            raise ValueError("request_id must be a non-empty string")
        if request_id in self._samples:
            raise ValueError(f"request id {request_id!r} is already in use")
        return check_prompt(
            prompt,
            params,
            vocab_size=self.model_config.vocab_size,
            max_model_len=self.model_config.max_model_len,
        )

    def abort_request(self, request_ids: Iterable[str]) -> None:
        """End requests whether waiting or running; blocks are freed now, deltas come next step."""
        if isinstance(request_ids, str):
            request_ids = [request_ids]
        for request_id in request_ids:
            samples = self._samples.pop(request_id, None)
            if samples is None:
                continue
            live = [s.request_id for s in samples]
            self.scheduler.finish_requests(live, RequestStatus.FINISHED_ABORTED)
            self._held.pop(samples[0].request_id, None)
            for sample in samples:
                if not sample.is_finished or sample.status == RequestStatus.FINISHED_ABORTED:
                    if not sample.is_finished:  # held back, never reached the scheduler
                        sample.status = RequestStatus.FINISHED_ABORTED
                    self.runner.remove_request(sample.request_id)
                    self._pending.append(take_delta(sample))

    # -- one step ------------------------------------------------------------------------------

    def step(self) -> list[RequestOutputDelta]:
        """One step: the deltas of the step computed last. With async scheduling the next
        step is queued before they are read (engine/async_steps.py)."""
        outputs, self._pending = self._pending, []
        steps = self.async_steps
        if steps is not None and steps.must_drain():
            outputs += self._read(steps.take())
        sched_out = self.scheduler.schedule()
        # Dropped while waiting: their adapter was unloaded, or their grammar failed.
        for request in sched_out.dropped_requests:
            outputs.append(take_delta(request))
            self._on_finished(request)
        if steps is not None and steps.can_launch(sched_out):
            outputs += self._read(steps.launch(sched_out))
        else:
            if steps is not None and steps.in_flight is not None:
                outputs += self._read(steps.take())
                drop_finished(sched_out)
            if sched_out.is_empty:
                self.structured.wait_for_pending()
            else:
                outputs += self._execute(sched_out)
        # Also after an empty step: a first sample dropped while waiting releases its siblings
        # (they end the same way on the next step) even when nothing else runs.
        if self._held:
            self._release_held()
        return outputs

    def _execute(self, sched_out: SchedulerOutput) -> list[RequestOutputDelta]:
        self._in_flight = sched_out
        try:
            model_out = self.runner.execute(sched_out)
        finally:
            self._in_flight = None
        return self._update(sched_out, model_out)

    def _read(self, launched: LaunchedStep | None) -> list[RequestOutputDelta]:
        if launched is None:
            return []
        return self._update(launched.sched_out, launched.read(), committed=True)

    def _update(self, sched_out, model_out, committed: bool = False) -> list[RequestOutputDelta]:
        deltas = []
        updated = self.scheduler.update_from_output(sched_out, model_out, committed=committed)
        for request in updated:
            deltas.append(take_delta(request))
            if request.is_finished:
                self._on_finished(request)
        return deltas

    def enable_step_preemption(self, hook: Callable[[], None] | None) -> bool:
        """Have ``hook`` called between the layers of every step, where it may call
        ``step_inside`` (engine/core/step_preemption.py); None turns it off. True if set: the
        fair policy on a CPU with ``step_preemption`` on."""
        config = self.config
        fair = config.scheduling_policy == "fair" and config.step_preemption
        if hook is not None and not (fair and self.device.type == "cpu"):
            return False
        self.runner.preemption_hook = hook
        return self.preempts

    @property
    def preempts(self) -> bool:
        return self.runner.preemption_hook is not None

    @property
    def num_tokens_in_flight(self) -> int:  # of the step the runner computes; 0 between steps
        return self._in_flight.total_num_scheduled_tokens if self._in_flight else 0

    def step_inside(
        self, request_ids: Iterable[str], *, between_steps: bool = False
    ) -> list[RequestOutputDelta]:
        """From the preemption hook: run those of the requests just added (their ids) that may
        as a step of their own, inside the step in flight; their deltas ([] if none ran).
        ``between_steps``: the same between two steps, ahead of a batch that runs others."""
        in_step = SchedulerOutput() if between_steps else self._in_flight
        if in_step is None or (between_steps and not (self.scheduler.running and self.preempts)):
            return []
        candidates = [s for rid in request_ids for s in self._samples.get(rid, ())]
        sched_out = schedule_inside(self.scheduler, candidates, in_step)
        if sched_out.is_empty:
            return []
        return self._update(sched_out, self.runner.execute(sched_out))

    def _on_finished(self, request: Request) -> None:
        self.runner.remove_request(request.request_id)
        samples = self._samples.get(request.external_id)
        if samples is not None and all(s.is_finished for s in samples):
            del self._samples[request.external_id]

    def _release_held(self) -> None:
        for first_id, (first, others) in list(self._held.items()):
            if first.is_prefill_done or first.is_finished:
                del self._held[first_id]
                for sample in others:
                    self.scheduler.add_request(sample)

    # -- introspection ---------------------------------------------------------------------------

    def has_unfinished_requests(self) -> bool:
        launched = self.async_steps is not None and self.async_steps.in_flight is not None
        return bool(self.scheduler.num_unfinished or self._held or self._pending or launched)

    def stats(self) -> EngineStats:
        s = self.scheduler
        kv = s.kv_cache
        return EngineStats(
            num_running=len(s.running),
            num_waiting=len(s.waiting) + sum(len(o) for _, o in self._held.values()),
            kv_cache_usage=kv.usage,
            num_free_blocks=kv.num_free_blocks,
            num_total_blocks=kv.num_total_blocks,
            prefix_cache_queries=s.prefix_cache_queries,
            prefix_cache_hits=s.prefix_cache_hits,
            num_preemptions=s.num_preemptions,
            num_steps_inside=s.num_steps_inside,
            prompt_tokens_total=s.prompt_tokens_total,
            generation_tokens_total=s.generation_tokens_total,
            max_num_seqs=self.config.max_num_seqs,
            **self.lora_requests_info(),
            **(s.speculator.totals() if s.speculator is not None else {}),
        )
