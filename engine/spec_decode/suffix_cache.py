"""The suffix cache: per tenant, a suffix automaton over that tenant's recent outputs, which
proposes what followed the longest earlier occurrence of a request's latest tokens.

Scoped by the request's cache salt, which the API derives on the server from the tenant (a
client salt only narrows it): a request can only ever be proposed tokens its own scope wrote,
so the cache is no side channel between tenants. Memory is bounded twice: each scope keeps
at most ``max_tokens_per_scope`` tokens of its newest outputs, and all scopes together at most
``max_total_tokens`` (least recently used scopes evicted whole).

A suffix automaton only grows, so a scope keeps two: outputs go into the newer one until it
holds half the scope's tokens, then the older one is dropped and a new one started; a lookup
asks both. Each token is added once. Dropping the oldest outputs by rebuilding one automaton
from the rest, as before, rebuilt ~16,000 tokens at every output once a busy tenant's scope
was full: 7 s of a 1 s flood's steps.

Outputs are queued as they finish and added to the automata at the scope's next lookup. A
busy engine looks nothing up (the speculator proposes no drafts with more than
``speculative_max_num_seqs`` running), so the queue keeps only the newest outputs that fit the
scope, and the others are never built: adding each output as it finished was 4% of the host's
time a step on the H200 at 256 sequences. A lookup builds at most ``BUILD_TOKENS`` queued
tokens (about 2 ms on a CPU), the oldest first, so after a busy spell a scope catches up over
a few steps instead of stalling one step for a whole scope (16,384 tokens: about 30 ms).

A suffix automaton is the smallest automaton accepting every substring of its text: one state
per class of substrings with the same end positions, at most 2n states, built online in
amortised O(1) per token. ``first_end`` of a state is where its substrings first end, so the
continuation after a match is read straight from the text. Documents are joined by distinct
negative separators that no token matches, so no match or proposal crosses two outputs.
"""

from __future__ import annotations

from collections import OrderedDict, deque

# Queued tokens one lookup adds to its scope's automata at most (whole outputs, at least one).
BUILD_TOKENS = 1024


class SuffixAutomaton:
    __slots__ = ("first_end", "last", "length", "link", "next", "num_documents", "tokens")

    def __init__(self) -> None:
        self.next: list[dict[int, int]] = [{}]
        self.link = [-1]
        self.length = [0]
        self.first_end = [-1]
        self.last = 0
        self.tokens: list[int] = []
        self.num_documents = 0

    def add_document(self, tokens: list[int]) -> None:
        for token in tokens:
            self._extend(token)
        self.num_documents += 1
        self._extend(-self.num_documents)  # a separator unique to this document

    def _extend(self, token: int) -> None:
        pos = len(self.tokens)
        self.tokens.append(token)
        cur = self._new_state(self.length[self.last] + 1, pos)
        p = self.last
        while p != -1 and token not in self.next[p]:
            self.next[p][token] = cur
            p = self.link[p]
        if p == -1:
            self.link[cur] = 0
        else:
            q = self.next[p][token]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = self._new_state(self.length[p] + 1, self.first_end[q])
                self.next[clone] = dict(self.next[q])
                self.link[clone] = self.link[q]
                while p != -1 and self.next[p].get(token) == q:
                    self.next[p][token] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur

    def _new_state(self, length: int, first_end: int) -> int:
        self.next.append({})
        self.link.append(-1)
        self.length.append(length)
        self.first_end.append(first_end)
        return len(self.length) - 1

    def propose(self, context: list[int], k: int, max_match: int) -> tuple[int, list[int]]:
        """(match length, up to ``k`` tokens) after the longest suffix of the last
        ``max_match`` tokens of ``context`` that occurs in the text; (0, []) if none does."""
        state, matched = 0, 0
        nxt, link, length = self.next, self.link, self.length
        for token in context[-max_match:]:
            while state and token not in nxt[state]:
                state = link[state]
                matched = length[state]
            if token in nxt[state]:
                state = nxt[state][token]
                matched += 1
        if matched == 0:
            return 0, []
        start = self.first_end[state] + 1
        proposal = []
        for token in self.tokens[start : start + k]:
            if token < 0:
                break  # the end of that document
            proposal.append(token)
        return matched, proposal


class _Generation:
    __slots__ = ("automaton", "num_tokens")

    def __init__(self) -> None:
        self.automaton = SuffixAutomaton()
        self.num_tokens = 0

    def add(self, tokens: list[int]) -> None:
        self.automaton.add_document(tokens)
        self.num_tokens += len(tokens)


class _Scope:
    """One scope's outputs: an older and a newer generation (the module docstring), and the
    outputs not yet added to them."""

    __slots__ = ("max_tokens", "newer", "num_pending", "older", "pending")

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.older: _Generation | None = None
        self.newer = _Generation()
        self.pending: deque[list[int]] = deque()
        self.num_pending = 0

    @property
    def num_tokens(self) -> int:
        built = self.newer.num_tokens + (self.older.num_tokens if self.older else 0)
        return built + self.num_pending

    def add(self, tokens: list[int]) -> None:
        """Queue an output (at most ``max_tokens`` long). Past the bound the oldest outputs go
        first, the automata's before the queue's."""
        self.pending.append(tokens)
        self.num_pending += len(tokens)
        if self.num_tokens > self.max_tokens:
            self.older = None
        if self.num_tokens > self.max_tokens:  # (counted again without the older generation)
            self.newer = _Generation()
        while self.num_pending > self.max_tokens:
            self.num_pending -= len(self.pending.popleft())

    def build(self) -> None:
        """Add queued outputs to the automata, oldest first, until BUILD_TOKENS are added."""
        budget = BUILD_TOKENS
        while self.pending and budget > 0:
            tokens = self.pending.popleft()
            self.num_pending -= len(tokens)
            budget -= len(tokens)
            newer = self.newer
            if newer.num_tokens and newer.num_tokens + len(tokens) > self.max_tokens // 2:
                self.older, self.newer = newer, _Generation()
            self.newer.add(tokens)  # add() kept the scope within its bound

    def propose(self, context: list[int], k: int, max_match: int) -> tuple[int, list[int]]:
        if self.pending:
            self.build()
        best = self.newer.automaton.propose(context, k, max_match)
        if self.older is not None:
            older = self.older.automaton.propose(context, k, max_match)
            if older[0] > best[0]:  # a longer match wins; among equals, the newer output
                best = older
        return best


class SuffixCache:
    """Each scope's (tenant's) recent outputs, in suffix automata per scope."""

    def __init__(self, *, max_tokens_per_scope: int = 16384, max_total_tokens: int = 65536):
        self.max_tokens_per_scope = max_tokens_per_scope
        self.max_total_tokens = max_total_tokens
        self._scopes: OrderedDict[str, _Scope] = OrderedDict()  # least recently used first
        self.num_total_tokens = 0

    def __len__(self) -> int:
        return len(self._scopes)

    def add(self, scope: str, tokens: list[int]) -> None:
        """Remember an output of ``scope`` (the request's cache salt)."""
        tokens = list(tokens[-self.max_tokens_per_scope :])
        if not tokens:
            return
        entry = self._scopes.get(scope)
        if entry is None:
            entry = self._scopes[scope] = _Scope(self.max_tokens_per_scope)
        self._scopes.move_to_end(scope)
        before = entry.num_tokens
        entry.add(tokens)
        self.num_total_tokens += entry.num_tokens - before
        while self.num_total_tokens > self.max_total_tokens and len(self._scopes) > 1:
            _, evicted = self._scopes.popitem(last=False)
            self.num_total_tokens -= evicted.num_tokens

    def propose(
        self, scope: str, context: list[int], k: int, max_match: int
    ) -> tuple[int, list[int]]:
        entry = self._scopes.get(scope)
        if entry is None:
            return 0, []
        self._scopes.move_to_end(scope)
        before = entry.num_tokens
        proposal = entry.propose(context, k, max_match)
        self.num_total_tokens += entry.num_tokens - before  # building may drop older outputs
        return proposal
