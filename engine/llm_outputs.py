"""The offline ``LLM``'s outputs: each request's samples gathered from the engine's deltas.

A sample with stop strings is detokenized as its tokens arrive (``StreamedSample``), since a
stop string must end it as soon as its text appears. A sample without any (``DeferredSample``)
has no reader of its text before ``generate`` returns, so its tokens are decoded once, at the
end, in one batch with the others (``decode_deferred``): on a GPU the incremental detokenizer's
two decodes a token were a fifth of the host's time a step (docs/benchmarks.md), in series with
the model. Both give the same text: the whole output decoded, less a character its last tokens
left incomplete (engine/text/detokenizer.py, ``flush``).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.outputs import CompletionOutput, RequestOutput, RequestOutputDelta
from engine.sampling_params import SamplingParams
from engine.text.detokenizer import REPLACEMENT_CHAR, Decoder
from engine.text.sample_output import SampleOutputProcessor


class StreamedSample:
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

    @property
    def finished(self) -> bool:
        return self.processor.finished

    @property
    def cut_short(self) -> bool:
        return self.processor.cut_short

    @property
    def finish_reason(self) -> str | None:
        return self.processor.finish_reason

    @property
    def stop_reason(self) -> int | str | None:
        return self.processor.stop_reason

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


class DeferredSample:
    """One sample without stop strings: its tokens now, its text from ``decode_deferred``."""

    cut_short = False  # only a stop string ends a sample before the engine does

    def __init__(self, params: SamplingParams) -> None:
        self.token_ids: list[int] = []
        self.logprobs: list | None = [] if params.logprobs is not None else None
        self.skip_special_tokens = params.skip_special_tokens
        self.text = ""
        self.finished = False
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None

    def apply(self, delta: RequestOutputDelta) -> None:
        if self.finished:
            return
        self.token_ids.extend(delta.new_token_ids)
        if self.logprobs is not None and delta.new_logprobs is not None:
            self.logprobs.extend(delta.new_logprobs)
        if delta.finished:
            self.finished = True
            self.finish_reason, self.stop_reason = delta.finish_reason, delta.stop_reason


def decode_deferred(samples: Sequence[DeferredSample], tokenizer: Decoder) -> None:
    """Set each sample's text: the batch decoded in one call per ``skip_special_tokens``."""
    for skip in (True, False):
        group = [s for s in samples if s.skip_special_tokens is skip]
        if not group:
            continue
        texts = _decode_batch(tokenizer, [s.token_ids for s in group], skip)
        for sample, text in zip(group, texts, strict=True):
            # As the incremental detokenizer's flush: a character cut off by the end is no
            # part of what the model wrote.
            sample.text = text.rstrip(REPLACEMENT_CHAR)


def _decode_batch(tokenizer, id_lists: list[list[int]], skip: bool) -> list[str]:
    if hasattr(tokenizer, "decode_batch"):  # a fast tokenizer's own (tokenizers.Tokenizer)
        return tokenizer.decode_batch(id_lists, skip_special_tokens=skip)
    if hasattr(tokenizer, "batch_decode"):  # transformers' tokenizers
        return tokenizer.batch_decode(id_lists, skip_special_tokens=skip)
    return [tokenizer.decode(ids, skip_special_tokens=skip) for ids in id_lists]


Sample = StreamedSample | DeferredSample


class RequestState:
    """One prompt's samples and what its final ``RequestOutput`` reports."""

    def __init__(
        self, request_id, prompt, prompt_token_ids, params: SamplingParams, tokenizer: Decoder
    ) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.has_stop_strings = bool(params.stop)
        self.samples: list[Sample] = [
            StreamedSample(tokenizer, params) if params.stop else DeferredSample(params)
            for _ in range(params.n)
        ]
        self.prompt_logprobs = None
        self.num_cached_tokens = 0
        self.abort_sent = False

    @property
    def finished(self) -> bool:
        return all(s.finished for s in self.samples)

    @property
    def needs_abort(self) -> bool:
        """Every sample is done, yet the engine still runs those cut short by a stop string:
        it ends samples only per request."""
        if not self.has_stop_strings:  # asked after every delta: the usual answer, at once
            return False
        return self.finished and not self.abort_sent and any(s.cut_short for s in self.samples)

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
