"""Stop strings matched on streamed text, across token boundaries.

The engine sees token ids only, so the API process (and the offline LLM) match stop strings.
Text that could be the start of a stop string is held back until the next piece decides it, so
a client never sees the first half of a stop string that is then cut. Before ``min_tokens``
no stop string may end generation: that text passes through unmatched, but is remembered, so
a stop string that begins there and ends later still stops (as vLLM's check on the output text
does); what was already passed through stays emitted.
"""

from __future__ import annotations


class StopStringMatcher:
    """Feed text pieces; get back the text safe to emit and, once, the stop string matched."""

    def __init__(self, stop: list[str] | None, *, include_stop_str_in_output: bool = False):
        self.stop = [s for s in (stop or []) if s]
        self.include = include_stop_str_in_output
        self._held = ""
        # The tail of the text passed through unmatched: a stop string may begin in it.
        self._passed = ""
        self.matched: str | None = None

    @property
    def held_text(self) -> str:
        return self._held

    def feed(self, text: str) -> str:
        """Return the text that may be emitted now; sets ``matched`` when a stop string hits."""
        if self.matched is not None:
            return ""
        if not self.stop:
            return text
        pending = self._held + text
        passed, self._passed = self._passed, ""
        hit = self._earliest_match(passed + pending, ending_after=len(passed))
        if hit is not None:
            pos, stop = hit
            self.matched = stop
            self._held = ""
            end = pos + len(stop) if self.include else pos
            return pending[: max(0, end - len(passed))]
        keep = self._longest_stop_prefix_suffix(pending)
        self._held = pending[len(pending) - keep :] if keep else ""
        return pending[: len(pending) - keep]

    def pass_through(self, text: str) -> str:
        """Emit ``text`` unmatched (generation may not stop yet), remembering its tail."""
        if self.stop:
            longest = max(len(stop) for stop in self.stop)
            self._passed = (self._passed + text)[-(longest - 1) :] if longest > 1 else ""
        return text

    def flush(self) -> str:
        """At the end of generation: the held text was not a stop string after all."""
        held, self._held = self._held, ""
        return held

    def _earliest_match(self, text: str, *, ending_after: int = 0) -> tuple[int, str] | None:
        """The earliest stop string in ``text`` that ends past index ``ending_after``."""
        best: tuple[int, str] | None = None
        for stop in self.stop:
            pos = text.find(stop, max(0, ending_after - len(stop) + 1))
            if pos != -1 and (best is None or pos < best[0]):
                best = (pos, stop)
        return best

    def _longest_stop_prefix_suffix(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop string."""
        longest = 0
        for stop in self.stop:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:size]):
                    longest = size
                    break
        return longest
