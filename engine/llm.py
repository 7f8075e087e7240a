"""The offline API, shaped like vLLM's: ``LLM(model=path).generate(prompts, sampling_params)``.

Prompts are strings (tokenized with the checkpoint's tokenizer) or ``{"prompt_token_ids": [...]}``.
Unlike the engine, this class also honours ``stop`` strings, as vLLM's offline API does: it
detokenizes each sample as tokens arrive and ends the sample at the first stop string.
``lora_request=LoRARequest(name, int_id, path)`` (one for all prompts, or one per prompt, None
for the base model) runs prompts with a LoRA adapter, loaded into the engine on first use.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from engine.adapters import AdapterIdentity
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.lora.request import LoRARequest
from engine.outputs import CompletionOutput, RequestOutput, RequestOutputDelta
from engine.sampling_params import SamplingParams

_ENGINE_ARGS = {f.name for f in fields(EngineConfig)} - {"model"}


class LLM:
    def __init__(self, model: str, *, tokenizer: str | None = None, **engine_args: Any) -> None:
        unknown = set(engine_args) - _ENGINE_ARGS
        if unknown:
            raise ValueError(
                f"unknown engine argument(s) {sorted(unknown)}; known: {sorted(_ENGINE_ARGS)}"
            )
        self.llm_engine = LLMEngine(EngineConfig(model=str(model), **engine_args))
        self._tokenizer_path = tokenizer or str(model)
        self._tokenizer = None
        self._counter = itertools.count()
        self._adapters: dict[LoRARequest, AdapterIdentity] = {}

    def get_tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self._tokenizer_path)
        return self._tokenizer

    def generate(
        self,
        prompts: str | dict | Sequence[str | dict],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool = False,
        lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None,
    ) -> list[RequestOutput]:
        """Run every prompt to completion; outputs come back in the order of ``prompts``."""
        if isinstance(prompts, str | dict):
            prompts = [prompts]
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            params_list = [sampling_params] * len(prompts)
        else:
            params_list = list(sampling_params)
            if len(params_list) != len(prompts):
                raise ValueError(
                    f"got {len(prompts)} prompts but {len(params_list)} sampling_params"
                )
        adapters = self._adapters_for(lora_request, len(prompts))
        engine = self.llm_engine
        states: dict[str, _RequestState] = {}
        order: list[str] = []
        try:
            for prompt, params, adapter in zip(prompts, params_list, adapters, strict=True):
                text, token_ids = self._encode(prompt)
                request_id = str(next(self._counter))
                engine.add_request(request_id, token_ids, params, adapter=adapter)
                states[request_id] = _RequestState(request_id, text, token_ids, params)
                order.append(request_id)
            while engine.has_unfinished_requests():
                for delta in engine.step():
                    state = states[delta.request_id]
                    state.apply(delta, self)
                    if state.stopped_by_string and not state.abort_sent:
                        state.abort_sent = True
                        engine.abort_request([delta.request_id])
        except BaseException:
            engine.abort_request(order)
            while engine.has_unfinished_requests():
                engine.step()
            raise
        return [states[rid].to_output(self) for rid in order]

    def _adapters_for(
        self, lora_request: LoRARequest | Sequence[LoRARequest | None] | None, count: int
    ) -> list[AdapterIdentity | None]:
        """One adapter identity (or None) per prompt, loading adapters not seen before."""
        if lora_request is None or isinstance(lora_request, LoRARequest):
            requests = [lora_request] * count
        else:
            requests = list(lora_request)
            if len(requests) != count:
                raise ValueError(f"got {count} prompts but {len(requests)} lora_request entries")
        identities = []
        for request in requests:
            if request is None:
                identities.append(None)
                continue
            if not isinstance(request, LoRARequest):
                raise ValueError(f"lora_request entries must be LoRARequest, got {request!r}")
            identity = self._adapters.get(request)
            if identity is None or not self.llm_engine.has_adapter(identity):
                identity = self.llm_engine.load_adapter(request.lora_name, request.lora_path)
                self._adapters[request] = identity
            identities.append(identity)
        return identities

    def _encode(self, prompt: str | dict) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            return prompt, self.get_tokenizer().encode(prompt, add_special_tokens=True)
        if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
            return prompt.get("prompt"), list(prompt["prompt_token_ids"])
        if isinstance(prompt, dict) and "prompt" in prompt:
            return prompt["prompt"], self.get_tokenizer().encode(prompt["prompt"])
        raise ValueError('a prompt must be a string or a dict with "prompt_token_ids" or "prompt"')

    def _decode(self, token_ids: list[int], params: SamplingParams) -> str:
        return self.get_tokenizer().decode(
            token_ids, skip_special_tokens=params.skip_special_tokens
        )


class _SampleState:
    __slots__ = ("finish_reason", "logprobs", "stop_reason", "text", "token_ids")

    def __init__(self, want_logprobs: bool) -> None:
        self.token_ids: list[int] = []
        self.logprobs: list | None = [] if want_logprobs else None
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self.text: str | None = None


class _RequestState:
    def __init__(self, request_id, prompt, prompt_token_ids, params: SamplingParams) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.params = params
        self.samples = [_SampleState(params.logprobs is not None) for _ in range(params.n)]
        self.prompt_logprobs = None
        self.num_cached_tokens = 0
        self.stopped_by_string = False
        self.abort_sent = False

    @property
    def finished(self) -> bool:
        return all(s.finish_reason is not None for s in self.samples)

    def apply(self, delta: RequestOutputDelta, llm: LLM) -> None:
        sample = self.samples[delta.index]
        if sample.finish_reason is not None:
            return  # ended by a stop string: later tokens (and the abort) are dropped
        sample.token_ids.extend(delta.new_token_ids)
        if delta.new_logprobs is not None and sample.logprobs is not None:
            sample.logprobs.extend(delta.new_logprobs)
        if delta.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = delta.prompt_logprobs
        if delta.index == 0:
            self.num_cached_tokens = delta.num_cached_tokens
        if self.params.stop and delta.new_token_ids:
            text = llm._decode(sample.token_ids, self.params)
            cut = _find_stop(text, self.params)
            if cut is not None:
                sample.text, sample.stop_reason = cut
                sample.finish_reason = "stop"
                self._trim_tokens(sample, llm)
                # The engine ends samples only per request: abort once every sample is done.
                if self.finished:
                    self.stopped_by_string = True
                return
        if delta.finished:
            sample.finish_reason = delta.finish_reason
            sample.stop_reason = delta.stop_reason

    def _trim_tokens(self, sample: _SampleState, llm: LLM) -> None:
        # Keep the shortest token prefix whose text still reaches the cut point.
        for n in range(len(sample.token_ids) + 1):
            if len(llm._decode(sample.token_ids[:n], self.params)) >= len(sample.text):
                del sample.token_ids[n:]
                if sample.logprobs is not None:
                    del sample.logprobs[n:]
                return

    def to_output(self, llm: LLM) -> RequestOutput:
        outputs = []
        for i, s in enumerate(self.samples):
            text = s.text if s.text is not None else llm._decode(s.token_ids, self.params)
            logprobs = None
            cumulative = None
            if s.logprobs is not None:
                logprobs = [{lp.token_id: lp.logprob, **dict(lp.top)} for lp in s.logprobs]
                cumulative = sum(lp.logprob for lp in s.logprobs)
            outputs.append(
                CompletionOutput(
                    index=i,
                    text=text,
                    token_ids=s.token_ids,
                    cumulative_logprob=cumulative,
                    logprobs=logprobs,
                    finish_reason=s.finish_reason,
                    stop_reason=s.stop_reason,
                )
            )
        prompt_logprobs = None
        if self.prompt_logprobs is not None:
            prompt_logprobs = [
                None if lp is None else {lp.token_id: lp.logprob, **dict(lp.top)}
                for lp in self.prompt_logprobs
            ]
        return RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=self.prompt_token_ids,
            prompt_logprobs=prompt_logprobs,
            outputs=outputs,
            finished=True,
            num_cached_tokens=self.num_cached_tokens,
        )


def _find_stop(text: str, params: SamplingParams) -> tuple[str, str] | None:
    """Text up to the earliest stop string (kept if include_stop_str_in_output), and the string."""
    best = None
    for stop in params.stop:
        pos = text.find(stop)
        if pos >= 0 and (best is None or pos < best[0]):
            best = (pos, stop)
    if best is None:
        return None
    pos, stop = best
    end = pos + len(stop) if params.include_stop_str_in_output else pos
    return text[:end], stop
