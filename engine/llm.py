"""The offline API, shaped like vLLM's: ``LLM(model=path).generate(prompts, sampling_params)``.

Prompts are strings (tokenized with the checkpoint's tokenizer) or ``{"prompt_token_ids": [...]}``.
Unlike the engine, this class also honours ``stop`` strings, as vLLM's offline API does: a
sample with stop strings is detokenized as tokens arrive and cut at the first one, by the same
SampleOutputProcessor (engine/text/sample_output.py) the API processes use; the others are
decoded once, at the end (engine/llm_outputs.py).
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
from engine.llm_outputs import DeferredSample, RequestState, decode_deferred
from engine.lora.request import LoRARequest
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams
from engine.structured.spec import validate as validate_structured
from engine.text.detokenizer import Decoder

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
        states: dict[str, RequestState] = {}
        order: list[str] = []
        try:
            for prompt, params, adapter in zip(prompts, params_list, adapters, strict=True):
                text, token_ids = self._encode(prompt)
                request_id = str(next(self._counter))
                engine.add_request(request_id, token_ids, params, adapter=adapter)
                states[request_id] = RequestState(
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
        samples = [s for state in states.values() for s in state.samples]
        deferred = [s for s in samples if isinstance(s, DeferredSample)]
        decode_deferred(deferred, self._text_decoder())
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
