"""The offline API, shaped like vLLM's: ``LLM(model=path).generate(prompts, sampling_params)``.

Prompts are strings (tokenized with the checkpoint's tokenizer) or ``{"prompt_token_ids": [...]}``.
Unlike the engine, this class also honours ``stop`` strings, as vLLM's offline API does: each
sample is detokenized as tokens arrive and cut at the first stop string, by the same
SampleOutputProcessor (engine/text/sample_output.py) the API processes use.
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
from engine.structured.spec import validate as validate_structured
from engine.text.detokenizer import Decoder
from engine.text.sample_output import SampleOutputProcessor

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
        self._decoder: Decoder | None = None
        self._counter = itertools.count()
        self._adapters: dict[LoRARequest, AdapterIdentity] = {}

    def get_tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self._tokenizer_path)
        return self._tokenizer

    def _text_decoder(self) -> Decoder:
        """What detokenizes outputs: the fast tokenizer's own decoder where transformers' decode
        would give the same text (no clean-up of spaces), since transformers' wrapper checks
        every id's type in Python and costs more than the decode of a detokenizer's few ids."""
        if self._decoder is None:
            tokenizer = self.get_tokenizer()
            backend = getattr(tokenizer, "backend_tokenizer", None)
            cleans_up = getattr(tokenizer, "clean_up_tokenization_spaces", True)
            self._decoder = tokenizer if backend is None or cleans_up else backend
        return self._decoder

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
        specs = {(s.kind, s.spec): s for p in params_list if (s := getattr(p, "structured", None))}
        for structured in specs.values():  # a bad spec is the caller's error: raised here, now
            validate_structured(structured)
        adapters = self._adapters_for(lora_request, len(prompts))
        engine = self.llm_engine
        states: dict[str, _RequestState] = {}
        order: list[str] = []
        try:
            for prompt, params, adapter in zip(prompts, params_list, adapters, strict=True):
                text, token_ids = self._encode(prompt)
                request_id = str(next(self._counter))
                engine.add_request(request_id, token_ids, params, adapter=adapter)
                states[request_id] = _RequestState(
                    request_id, text, token_ids, params, self._text_decoder()
                )
                order.append(request_id)
            while engine.has_unfinished_requests():
                for delta in engine.step():
                    state = states[delta.request_id]
                    state.apply(delta)
                    if state.needs_abort:
                        state.abort_sent = True
                        engine.abort_request([delta.request_id])
        except BaseException:
            engine.abort_request(order)
            while engine.has_unfinished_requests():
                engine.step()
            raise
        return [states[rid].to_output() for rid in order]

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


class _SampleState:
    """One sample's tokens and text, from the SampleOutputProcessor the API processes use,
    cut at a stop string to the tokens the text needs."""

    def __init__(self, tokenizer: Decoder, params: SamplingParams) -> None:
        self.token_ids: list[int] = []
        self.logprobs: list | None = [] if params.logprobs is not None else None
        self.text = ""  # final once the processor has finished
        self.processor = SampleOutputProcessor(
            tokenizer,
            stop=params.stop,
            include_stop_str_in_output=params.include_stop_str_in_output,
            skip_special_tokens=params.skip_special_tokens,
            min_tokens=params.min_tokens,
        )

    def apply(self, delta: RequestOutputDelta) -> None:
        update = self.processor.update(
            delta.new_token_ids,
            delta.new_logprobs,
            finish_reason=delta.finish_reason if delta.finished else None,
            stop_reason=delta.stop_reason,
        )
        if update is None:
            return  # ended by a stop string: later tokens (and the abort) are dropped
        self.text += update.text
        self.token_ids.extend(update.token_ids)
        if update.logprobs is not None and self.logprobs is not None:
            self.logprobs.extend(update.logprobs)
        if update.finish_reason is not None and self.processor.stopped_by_string:
            num_kept = self.processor.num_tokens_reaching(self.token_ids, self.text)
            del self.token_ids[num_kept:]
            if self.logprobs is not None:
                del self.logprobs[num_kept:]


class _RequestState:
    def __init__(
        self, request_id, prompt, prompt_token_ids, params: SamplingParams, tokenizer: Decoder
    ) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.samples = [_SampleState(tokenizer, params) for _ in range(params.n)]
        self.prompt_logprobs = None
        self.num_cached_tokens = 0
        self.abort_sent = False

    @property
    def finished(self) -> bool:
        return all(s.processor.finished for s in self.samples)

    @property
    def needs_abort(self) -> bool:
        """Every sample is done, yet the engine still runs those cut short by a stop string:
        it ends samples only per request."""
        return (
            self.finished
            and not self.abort_sent
            and any(s.processor.cut_short for s in self.samples)
        )

    def apply(self, delta: RequestOutputDelta) -> None:
        if delta.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = delta.prompt_logprobs
        if delta.index == 0:
            self.num_cached_tokens = delta.num_cached_tokens
        self.samples[delta.index].apply(delta)

    def to_output(self) -> RequestOutput:
        outputs = []
        for i, s in enumerate(self.samples):
            logprobs = None
            cumulative = None
            if s.logprobs is not None:
                logprobs = [{lp.token_id: lp.logprob, **dict(lp.top)} for lp in s.logprobs]
                cumulative = sum(lp.logprob for lp in s.logprobs)
            outputs.append(
                CompletionOutput(
                    index=i,
                    text=s.text,
                    token_ids=s.token_ids,
                    cumulative_logprob=cumulative,
                    logprobs=logprobs,
                    finish_reason=s.processor.finish_reason,
                    stop_reason=s.processor.stop_reason,
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
