"""Stop strings matched on streamed text, across token boundaries.

The engine sees token ids only, so the API process matches stop strings. Text that could be
the start of a stop string is held back until the next piece decides it, so a client never
sees the first half of a stop string that is then cut.
"""

from __future__ import annotations


class StopStringMatcher:
    """Feed text pieces; get back the text safe to emit and, once, the stop string matched."""

    def __init__(self, stop: list[str] | None, *, include_stop_str_in_output: bool = False):
        self.stop = [s for s in (stop or []) if s]
        self.include = include_stop_str_in_output
        self._held = ""
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
        hit = self._earliest_match(pending)
        if hit is not None:
            pos, stop = hit
            self.matched = stop
            self._held = ""
            return pending[: pos + len(stop)] if self.include else pending[:pos]
        keep = self._longest_stop_prefix_suffix(pending)
        self._held = pending[len(pending) - keep :] if keep else ""
        return pending[: len(pending) - keep]

    def flush(self) -> str:
        """At the end of generation: the held text was not a stop string after all."""
        held, self._held = self._held, ""
        return held

    def _earliest_match(self, text: str) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for stop in self.stop:
            pos = text.find(stop)
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
