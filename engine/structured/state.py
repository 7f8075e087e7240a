"""GrammarState: one sample's position in its grammar, kept on the Request.

Created when the request arrives, with the compiler's Future; ``ready`` turns true once the
grammar compiled (the scheduler does not admit the request before) or failed (``error``, and
the scheduler ends the request). The matcher advances by one token per sampled token and is
never rolled back: a preempted request keeps its output tokens when it is recomputed, so the
state stays exactly right.
"""

from __future__ import annotations

from concurrent.futures import Future

import llguidance


class GrammarState:
    __slots__ = ("_future", "error", "matcher")

    def __init__(self, future: Future) -> None:
        self._future: Future | None = future
        self.matcher: llguidance.LLMatcher | None = None
        self.error = ""

    def ready(self, output_token_ids: list[int]) -> bool:
        """Compiled (or failed: ``error``); cheap enough for the scheduler to ask every step.

        Output the request already has (a request resumed from a dead engine) is consumed
        first, so the grammar continues where that output left it."""
        future = self._future
        if future is None:
            return True
        if not future.done():
            return False
        self._future = None
        try:
            self.matcher = future.result().deep_copy()  # the template itself never advances
        except Exception as exc:  # any compile failure ends this request, never the engine
            self.error = str(exc) or type(exc).__name__
            return True
        for token_id in output_token_ids:
            if not self.accept(token_id):
                break
        return True

    def accept(self, token_id: int) -> bool:
        """Advance past a sampled token; False (and ``error`` set) if the grammar refuses it."""
        if self.matcher.consume_token(token_id):
            return True
        self.error = f"the grammar refused token {token_id}: {self.matcher.get_error()[:200]}"
        return False

    def fork(self, token_id: int) -> GrammarState:
        """A copy advanced past ``token_id`` (the mask after a draft token, engine/spec_decode/);
        this state does not move."""
        fork = GrammarState.__new__(GrammarState)
        fork._future, fork.error = None, ""
        fork.matcher = self.matcher.deep_copy()
        fork.matcher.consume_token(token_id)
        return fork

    @property
    def is_terminated(self) -> bool:
        """The grammar is complete and admits nothing more: the sample is done."""
        return self.matcher.is_stopped()

    def fill_mask(self, pointer: int, num_bytes: int) -> None:
        """Write the allowed next tokens, one bit per token, at ``pointer``."""
        self.matcher.unsafe_compute_mask_ptr(pointer, num_bytes)
