"""Prompt lookup: propose the tokens that followed the latest earlier occurrence of the
request's last n tokens (n from ``max_n`` down to ``min_n``) in its own prompt and output.

The index keeps one integer key per ``min_n``-gram of the sequence (the tokens packed into an
int64, so equal keys are equal n-grams), in position order, in a numpy array that grows with
the sequence. Indexing a prompt is one vectorized pass (a Python dict of n-grams cost about
3 us a token: 3 ms of a step for a 1,000-token prompt, in the step that every other request
of the batch waits on); a lookup is one vectorized comparison over the keys, then a few
candidate positions checked in Python. Longer matches win; among equally long ones the most
recent.
"""

from __future__ import annotations

import numpy as np

# Candidate occurrences checked per lookup, most recent first: a repeated short n-gram (a
# common word) has many, and the recent ones predict best.
MAX_CANDIDATES = 8
# Bits a token id takes in a packed key: vocabularies stay below 2^21 (2M) ids, so up to three
# tokens fit in an int64 exactly.
TOKEN_BITS = 21
MAX_MIN_N = 63 // TOKEN_BITS


class NgramIndex:
    __slots__ = ("_keys", "max_n", "min_n", "num_indexed")

    def __init__(self, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= min(max_n, MAX_MIN_N):
            raise ValueError(f"min_n must be 1..{MAX_MIN_N} and at most max_n, got {min_n}")
        self.min_n = min_n
        self.max_n = max_n
        # _keys[i]: the min_n-gram ending at position i + min_n - 1; capacity doubles as needed
        self._keys = np.empty(0, dtype=np.int64)
        self.num_indexed = 0  # tokens of the sequence seen so far

    @property
    def _num_keys(self) -> int:
        return max(self.num_indexed - self.min_n + 1, 0)

    def update(self, tokens: list[int]) -> None:
        """Index the tokens appended to ``tokens`` since the last call."""
        n, total = self.min_n, len(tokens)
        if total <= self.num_indexed:
            return
        # The new keys end at num_indexed.. total - 1; each reads the n - 1 tokens before it.
        start = max(self.num_indexed - n + 1, 0)
        window = np.asarray(tokens[start:total], dtype=np.int64)
        count = len(window) - n + 1
        if count > 0:
            keys = window[:count].copy()
            for i in range(1, n):
                keys = (keys << TOKEN_BITS) | window[i : i + count]
            first = self._num_keys
            if first + count > len(self._keys):
                grown = np.empty(max(2 * len(self._keys), first + count, 64), dtype=np.int64)
                grown[:first] = self._keys[:first]
                self._keys = grown
            self._keys[first : first + count] = keys
        self.num_indexed = total

    def _key(self, ngram: list[int]) -> int:
        key = 0
        for token in ngram:
            key = (key << TOKEN_BITS) | token
        return key

    def propose(self, tokens: list[int], k: int) -> tuple[int, list[int]]:
        """(match length, up to ``k`` proposed tokens) for the sequence ``tokens``; (0, [])
        when its last ``min_n`` tokens never occurred before."""
        self.update(tokens)
        n, last = self.min_n, len(tokens) - 1
        if last + 1 <= n or k <= 0:
            return 0, []
        # Earlier occurrences only: the last key is the suffix itself.
        earlier = self._keys[: self._num_keys - 1]
        hits = np.flatnonzero(earlier == self._key(tokens[last - n + 1 :]))
        if not len(hits):
            return 0, []
        best_len, best_end = 0, -1
        for index in reversed(hits[-MAX_CANDIDATES:].tolist()):
            end = index + n - 1
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
        return best_len, tokens[best_end + 1 : best_end + 1 + k]
