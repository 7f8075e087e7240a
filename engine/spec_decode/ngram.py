"""Prompt lookup: propose the tokens that followed the latest earlier occurrence of the
request's last n tokens (n from ``max_n`` down to ``min_n``) in its own prompt and output.

The index maps every ``min_n``-gram to the positions where it ends, updated as tokens arrive
(O(1) per token), so a lookup checks a few candidate positions instead of scanning the whole
context every step. Longer matches win; among equally long ones the most recent.
"""

from __future__ import annotations

# Candidate occurrences checked per lookup, most recent first: a repeated short n-gram (a
# common word) has many, and the recent ones predict best.
MAX_CANDIDATES = 8


class NgramIndex:
    __slots__ = ("_positions", "max_n", "min_n", "num_indexed")

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n = min_n
        self.max_n = max_n
        self._positions: dict[tuple[int, ...], list[int]] = {}
        self.num_indexed = 0  # tokens of the sequence seen so far

    def update(self, tokens: list[int]) -> None:
        """Index the tokens appended to ``tokens`` since the last call."""
        n = self.min_n
        for end in range(max(self.num_indexed, n - 1), len(tokens)):
            key = tuple(tokens[end - n + 1 : end + 1])
            self._positions.setdefault(key, []).append(end)
        self.num_indexed = len(tokens)

    def propose(self, tokens: list[int], k: int) -> tuple[int, list[int]]:
        """(match length, up to ``k`` proposed tokens) for the sequence ``tokens``; (0, [])
        when its last ``min_n`` tokens never occurred before."""
        self.update(tokens)
        n, last = self.min_n, len(tokens) - 1
        if last + 1 <= n or k <= 0:
            return 0, []
        candidates = self._positions.get(tuple(tokens[last - n + 1 :]))
        if not candidates:
            return 0, []
        best_len, best_end = 0, -1
        for end in reversed(candidates[-MAX_CANDIDATES - 1 :]):
            if end == last:
                continue  # the suffix itself
            length = n
            while (
                length < self.max_n
                and end - length >= 0
                and tokens[end - length] == tokens[last - length]
            ):
                length += 1
            if length > best_len:
                best_len, best_end = length, end
                if length == self.max_n:
                    break
        if best_end < 0:
            return 0, []
        return best_len, tokens[best_end + 1 : best_end + 1 + k]
