"""GrammarCompiler: compiles specs against the model's tokenizer off the engine's step path.

``submit`` returns at once with a Future; one worker thread builds the llguidance tokenizer (on
the first spec, about half a second for a 50k vocabulary) and compiles each grammar (llguidance
releases the GIL meanwhile), so the busy loop keeps stepping other requests. Compiled grammars
are cached by spec hash: a template matcher that is never advanced, which each sample copies
(microseconds). Failures are cached too: the same bad spec fails the same way.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import llguidance
from tokenizers import Tokenizer

from engine.protocol import StructuredOutput
from engine.structured.spec import StructuredOutputError, spec_key, to_grammar

logger = logging.getLogger(__name__)

CACHE_SIZE = 256


def load_ll_tokenizer(
    model_path: str | Path, vocab_size: int, eos_token_ids: list[int]
) -> llguidance.LLTokenizer:
    """llguidance's view of the checkpoint's tokenizer.json: token bytes for the vocabulary
    the model's logits cover (``vocab_size`` may exceed the tokenizer's, padded models)."""
    path = Path(model_path) / "tokenizer.json"
    if not path.is_file():
        raise StructuredOutputError(
            "structured outputs need the checkpoint's tokenizer.json, which is missing"
        )
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return llguidance.LLTokenizer(
        tokenizer.to_str(), n_vocab=vocab_size, eos_token=list(eos_token_ids) or None
    )


class GrammarCompiler:
    def __init__(self, model_path: str | Path, vocab_size: int, eos_token_ids: list[int]):
        self._model_path = model_path
        self._vocab_size = vocab_size
        self._eos_token_ids = list(eos_token_ids)
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar")
        self._cache: OrderedDict[str, Future] = OrderedDict()
        self._pending: set[Future] = set()
        self._lock = threading.Lock()

    def submit(self, structured: StructuredOutput) -> Future:
        """A Future of the compiled template matcher (or of StructuredOutputError)."""
        key = spec_key(structured)
        future = self._cache.get(key)
        if future is not None:
            self._cache.move_to_end(key)
            return future
        future = self._executor.submit(self._compile, structured)
        self._cache[key] = future
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    def wait_for_pending(self, timeout: float) -> None:
        """Block up to ``timeout`` s until a compile finishes (an idle engine, instead of
        spinning, while requests wait only for their grammar)."""
        pending = list(self._pending)
        if pending:
            wait(pending, timeout=timeout, return_when="FIRST_COMPLETED")

    def _compile(self, structured: StructuredOutput) -> llguidance.LLMatcher:
        grammar = to_grammar(structured)
        matcher = llguidance.LLMatcher(self._ll_tokenizer(), grammar, log_level=0)
        if matcher.is_error():
            raise StructuredOutputError(
                f"the {structured.kind} spec does not compile: "
                + " ".join(matcher.get_error().split())[:300]
            )
        return matcher

    def _ll_tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = load_ll_tokenizer(
                    self._model_path, self._vocab_size, self._eos_token_ids
                )
                logger.info("structured outputs: tokenizer of %s ready", self._model_path)
            return self._tokenizer
