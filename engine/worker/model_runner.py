"""Model runner: builds the flattened varlen batch of a step, runs the model, samples.

A step is ``prepare_inputs`` (engine/worker/step_inputs.py: each scheduled request's new
tokens, positions and block table from the SchedulerOutput; decodes and draft verifications
before prefill chunks as the attention backends expect), ``run_model`` and ``sample``, which
computes logits only where a token is sampled (the end of a request's known tokens) plus
prompt positions of requests that asked for prompt logprobs.

With LoRA, the step's adapter layout (which slot each token uses, grouped into segments) is
built once from the same request order and handed to the model, which applies it in every
projection. Steps without an adapter request skip LoRA entirely.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from engine.attention import AttentionMetadata, get_attention_backend
from engine.config import EngineConfig
from engine.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
from engine.device_copy import to_device
from engine.model_config import ModelConfig
from engine.models import load_model
from engine.outputs import TokenLogprobs
from engine.request import Request
from engine.resume import advance_generator
from engine.sample import Sampler, SamplingBatch
from engine.spec_decode.verify import DraftRow, DraftVerifier
from engine.structured.bitmask import GrammarBitmask
from engine.worker.cpu_allocator import loading_allocator
from engine.worker.cpu_threads import StepThreads
from engine.worker.cuda_graphs import maybe_capture_decode_graphs
from engine.worker.kv_cache import allocate_kv_caches, num_blocks_for
from engine.worker.launched_step import LaunchedStep
from engine.worker.step_inputs import ModelInputs, build_step_inputs

if TYPE_CHECKING:
    from engine.lora.manager import LoraManager
    from engine.models.decoder import LoraApply

logger = logging.getLogger(__name__)


def _report_cpu_kernels() -> None:
    """Build (or load) the native CPU kernels now, at start, and say which path runs."""
    from kernels.cpu import native_ops, unavailable_reason

    if native_ops() is None:
        logger.warning("CPU kernels unavailable, PyTorch fallbacks run: %s", unavailable_reason())


class ModelRunner:
    def __init__(
        self,
        config: EngineConfig,
        model_config: ModelConfig,
        *,
        device: torch.device,
        dtype: torch.dtype,
        lora: LoraManager | None = None,
    ) -> None:
        self.config = config
        self.model_config = model_config
        self.device = device
        self.dtype = dtype
        self.block_size = config.block_size
        self.eos_token_ids = frozenset(model_config.eos_token_ids)
        if device.type == "cpu":
            if config.cpu_threads is not None:
                torch.set_num_threads(config.cpu_threads)
            _report_cpu_kernels()
        self.backend = get_attention_backend(device, config.attention_backend)
        with loading_allocator() if device.type == "cpu" else contextlib.nullcontext():
            self.model = load_model(
                model_config,
                dtype=dtype,
                device=device,
                backend=self.backend,
                quantization=config.quantization,
            )
        free_bytes = self._profile_free_bytes() if device.type == "cuda" else None
        self.num_blocks = num_blocks_for(config, model_config, dtype, device, free_bytes)
        self.kv_caches = allocate_kv_caches(
            model_config, self.num_blocks, self.block_size, dtype, device
        )
        # CUDA graphs (engine/worker/cuda_graphs.py): decode steps replay a captured forward.
        # None (eager) on CPU and with the PyTorch attention backend.
        self.cuda_graphs = maybe_capture_decode_graphs(
            self.model,
            self.backend,
            self.kv_caches,
            max_num_seqs=config.max_num_seqs,
            max_model_len=model_config.max_model_len,
            block_size=self.block_size,
            device=device,
        )
        generator = torch.Generator(device=device)
        generator.manual_seed(config.seed)
        self.sampler = Sampler(generator)
        self.generators: dict[str, torch.Generator] = {}
        self.grammar_bitmask = GrammarBitmask(model_config.vocab_size, device)
        self.lora = lora  # None when the model cannot serve adapters
        # Small steps: one thread; the others: the cores the host's other processes leave.
        self.step_threads = StepThreads.for_model(
            model_config, device, share_host=not config.fixed_cpu_threads
        )
        # Called between layers of a step when set (engine/core/step_preemption.py); never
        # inside the step it may run itself.
        self.preemption_hook: Callable[[], None] | None = None
        self._in_hook = False

    # -- per-request state -------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        seed = request.sampling_params.seed
        if seed is not None:
            generator = torch.Generator(device=self.device)
            # Sample i of an n-sample request gets seed + i: seeded, yet not n identical copies.
            generator.manual_seed(seed + request.index)
            # A resumed request continues the seeded sequence where its dead engine left it.
            advance_generator(generator, request.num_output_tokens)
            self.generators[request.request_id] = generator

    def remove_request(self, request_id: str) -> None:
        self.generators.pop(request_id, None)

    # -- one step ----------------------------------------------------------------------------

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput) -> ModelRunnerOutput:
        inputs = self.prepare_inputs(out)
        if self.preemption_hook is not None and not self._in_hook:
            inputs.attention.checkpoint = self._checkpoint
        with self.step_threads.for_step(out.total_num_scheduled_tokens, starts=self._starts(out)):
            hidden = self.run_model(inputs)
            return self.sample(inputs, hidden)

    @torch.inference_mode()
    def launch(self, out: SchedulerOutput, in_flight: LaunchedStep | None = None) -> LaunchedStep:
        """Queue the step ``out`` on the device and return without waiting for it
        (engine/async_steps.py); tokens its requests still wait for come from ``in_flight``,
        on the device. Not for steps that verify draft tokens."""
        inputs = self.prepare_inputs(out, in_flight)
        with self.step_threads.for_step(out.total_num_scheduled_tokens, starts=self._starts(out)):
            hidden = self.run_model(inputs)
            prompt_logprobs = self._all_prompt_logprobs(inputs, hidden)
            draw = None
            if inputs.sample_requests:
                draw = self.sampler.draw(*self._logits_and_batch(inputs, hidden, in_flight))
        return LaunchedStep(out, inputs.sample_requests, draw, prompt_logprobs)

    def _starts(self, out: SchedulerOutput) -> bool:
        """Whether the step starts a request and is not nested in a paused one (cpu_threads)."""
        return bool(out.new_requests) and not self._in_hook

    def _checkpoint(self) -> None:
        hook = self.preemption_hook  # None once turned off, possibly by the hook itself
        if hook is None:
            return
        self._in_hook = True
        try:
            hook()
        finally:
            self._in_hook = False

    def prepare_inputs(
        self, out: SchedulerOutput, in_flight: LaunchedStep | None = None
    ) -> ModelInputs:
        """The step's flattened batch (engine/worker/step_inputs.py) and its LoRA layout."""
        inputs = build_step_inputs(out, self.block_size, self.device, in_flight)
        self.backend.prepare(inputs.attention)
        inputs.lora = self._lora_apply(inputs.requests, inputs.num_scheduled_tokens)
        return inputs

    def run_model(self, inputs: ModelInputs) -> torch.Tensor:
        """Hidden states of every token in the batch; replays a CUDA graph where one fits."""
        graphs = self.cuda_graphs
        if inputs.lora is None and graphs is not None and graphs.can_run(inputs.attention):
            return graphs.forward(inputs.input_ids, inputs.positions, inputs.attention)
        return self.model.forward(
            inputs.input_ids, inputs.positions, self.kv_caches, inputs.attention, lora=inputs.lora
        )

    def sample(self, inputs: ModelInputs, hidden: torch.Tensor) -> ModelRunnerOutput:
        """Prompt logprobs where asked, and one token per request at the end of its tokens."""
        result = ModelRunnerOutput(prompt_logprobs=self._all_prompt_logprobs(inputs, hidden))
        if not inputs.sample_requests:
            return result
        logits, batch = self._logits_and_batch(inputs, hidden)
        verifier = DraftVerifier(self.generators)
        verifier.save_generators(inputs.sample_requests, will_draw=not batch.all_greedy)
        sampled = self.sampler(logits, batch)
        for r, token, lp in zip(
            inputs.sample_requests, sampled.token_ids, sampled.logprobs, strict=True
        ):
            if isinstance(r, DraftRow):  # NO_TOKEN matches no draft: those before it may count
                verifier.add(r, token, lp)
                continue
            result.sampled_token_ids[r.request_id] = token
            if lp is not None:
                result.logprobs[r.request_id] = lp
        for rid, (token, lp, outcome) in verifier.settle().items():
            result.sampled_token_ids[rid] = token
            if lp is not None:
                result.logprobs[rid] = lp
            result.draft_outcomes[rid] = outcome
        return result

    def _all_prompt_logprobs(self, inputs: ModelInputs, hidden: torch.Tensor) -> dict[str, list]:
        found = {}
        starts = inputs.request_starts
        for i, r in enumerate(inputs.requests):
            if r.prompt_logprobs is not None and r.num_computed_tokens < r.num_prompt_tokens - 1:
                found[r.request_id] = self._prompt_logprobs(
                    r,
                    hidden[starts[i] : starts[i + 1]],
                    inputs.num_scheduled_tokens[r.request_id],
                )
        return found

    def _logits_and_batch(
        self, inputs: ModelInputs, hidden: torch.Tensor, in_flight: LaunchedStep | None = None
    ) -> tuple[torch.Tensor, SamplingBatch]:
        """The sampled rows' logits (grammar masks applied) and their sampling parameters;
        the tokens ``in_flight`` samples for rows with penalties, which count as output."""
        rows = to_device(inputs.sample_rows, torch.long, self.device)
        logits = self.model.compute_logits(hidden[rows])
        self.grammar_bitmask.apply(logits, inputs.sample_requests)  # structured outputs
        batch = SamplingBatch.from_requests(
            inputs.sample_requests,
            generators=self.generators,
            eos_token_ids=self.eos_token_ids,
            vocab_size=self.model_config.vocab_size,
            device=self.device,
        )
        if in_flight is not None:
            batch.add_pending_tokens(in_flight)
        return logits, batch

    def _lora_apply(self, ordered: list[Request], counts: dict[str, int]) -> LoraApply | None:
        """The step's LoRA hook for the model, or None when no request uses an adapter."""
        manager = self.lora
        if manager is None or all(r.adapter is None for r in ordered):
            return None
        # Loads adapters missing from the slots (the scheduler holds each one, so all fit).
        batch = manager.prepare_batch(
            [r.adapter for r in ordered], [counts[r.request_id] for r in ordered]
        )
        if not batch.has_lora:
            return None

        def apply(y: torch.Tensor, x: torch.Tensor, layer: int, module: str) -> torch.Tensor:
            return manager.apply(y, x, layer, module, batch)

        return apply

    def _prompt_logprobs(
        self, request: Request, hidden: torch.Tensor, num_new: int
    ) -> list[TokenLogprobs]:
        """Logprob of each next prompt token at this chunk's positions (skipping known ones)."""
        start = request.num_computed_tokens
        first = max(start, len(request.prompt_logprobs) - 1)  # positions already reported
        last = min(
            start + num_new, request.num_prompt_tokens - 1
        )  # the last position predicts nothing
        if last <= first:
            return []
        logprobs = torch.log_softmax(
            self.model.compute_logits(hidden[first - start : last - start]), -1
        )
        targets = torch.tensor(request.all_token_ids[first + 1 : last + 1], device=self.device)
        chosen = logprobs.gather(1, targets[:, None])
        ranks = ((logprobs > chosen).sum(-1) + 1).tolist()
        k = request.sampling_params.prompt_logprobs
        top_lp, top_ids = (
            logprobs.topk(k, dim=-1) if k else (logprobs[:, :0], targets[:, None][:, :0])
        )
        chosen_l, top_lp_l, top_ids_l = (
            chosen.squeeze(1).tolist(),
            top_lp.tolist(),
            top_ids.tolist(),
        )
        return [
            TokenLogprobs(
                request.all_token_ids[first + 1 + j],
                chosen_l[j],
                ranks[j],
                list(zip(top_ids_l[j], top_lp_l[j], strict=True)),
            )
            for j in range(last - first)
        ]

    # -- memory profiling (CUDA) ---------------------------------------------------------------

    def _profile_free_bytes(self) -> int:
        """Bytes left for the KV cache under gpu_memory_utilization, after a peak-size forward."""
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        num_tokens = min(self.config.max_num_batched_tokens, self.model_config.max_model_len)
        num_blocks = -(-num_tokens // self.block_size)
        caches = allocate_kv_caches(
            self.model_config, num_blocks, self.block_size, self.dtype, self.device, report=False
        )
        metadata = AttentionMetadata(
            slot_mapping=torch.arange(num_tokens, device=self.device),
            seq_lens=torch.tensor([num_tokens], device=self.device),
            block_tables=torch.arange(num_blocks, device=self.device)[None, :],
            seq_lens_list=[num_tokens],
            query_start_loc=[0, num_tokens],
            num_decodes=0,
            block_size=self.block_size,
        )
        self.backend.prepare(metadata)
        with torch.inference_mode():
            ids = torch.zeros(num_tokens, dtype=torch.long, device=self.device)
            hidden = self.model.forward(
                ids, torch.arange(num_tokens, device=self.device), caches, metadata
            )
            self.model.compute_logits(hidden[-min(num_tokens, self.config.max_num_seqs) :])
        torch.cuda.synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device)
        del caches, hidden
        torch.cuda.empty_cache()
        _, total = torch.cuda.mem_get_info(self.device)
        return int(total * self.config.gpu_memory_utilization) - peak
