"""The suffix cache: per tenant, a suffix automaton over that tenant's recent outputs, which
proposes what followed the longest earlier occurrence of a request's latest tokens.

Scoped by the request's cache salt, which the API derives on the server from the tenant (a
client salt only narrows it): a request can only ever be proposed tokens its own scope wrote,
so the cache is no side channel between tenants. Memory is bounded twice: each scope keeps
its newest outputs up to ``max_tokens_per_scope`` tokens (older ones dropped by a rebuild),
and all scopes together up to ``max_total_tokens`` (least recently used scopes evicted whole).

A suffix automaton is the smallest automaton accepting every substring of its text: one state
per class of substrings with the same end positions, at most 2n states, built online in
amortised O(1) per token. ``first_end`` of a state is where its substrings first end, so the
continuation after a match is read straight from the text. Documents are joined by distinct
negative separators that no token matches, so no match or proposal crosses two outputs.
"""

from __future__ import annotations

from collections import OrderedDict


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


class SuffixCache:
    """Each scope's (tenant's) recent outputs, in a suffix automaton per scope."""

    def __init__(self, *, max_tokens_per_scope: int = 16384, max_total_tokens: int = 65536):
        self.max_tokens_per_scope = max_tokens_per_scope
        self.max_total_tokens = max_total_tokens
        # scope -> its outputs, oldest first (to rebuild without the oldest), least recently
        # used scope first.
        self._documents: OrderedDict[str, list[list[int]]] = OrderedDict()
        self._automata: dict[str, SuffixAutomaton] = {}
        self._num_tokens: dict[str, int] = {}
        self.num_total_tokens = 0

    def __len__(self) -> int:
        return len(self._documents)

    def add(self, scope: str, tokens: list[int]) -> None:
        """Remember an output of ``scope`` (the request's cache salt)."""
        tokens = list(tokens[-self.max_tokens_per_scope :])
        if not tokens:
            return
        documents = self._documents.setdefault(scope, [])
        self._documents.move_to_end(scope)
        documents.append(tokens)
        self._num_tokens[scope] = self._num_tokens.get(scope, 0) + len(tokens)
        self.num_total_tokens += len(tokens)
        if self._num_tokens[scope] > self.max_tokens_per_scope:
            while self._num_tokens[scope] > self.max_tokens_per_scope:
                dropped = documents.pop(0)
                self._num_tokens[scope] -= len(dropped)
                self.num_total_tokens -= len(dropped)
            self._automata.pop(scope, None)  # rebuilt from what is left on the next lookup
        else:
            automaton = self._automata.get(scope)
            if automaton is not None:
                automaton.add_document(tokens)
        while self.num_total_tokens > self.max_total_tokens and len(self._documents) > 1:
            self._evict(next(iter(self._documents)))

    def _evict(self, scope: str) -> None:
        del self._documents[scope]
        self._automata.pop(scope, None)
        self.num_total_tokens -= self._num_tokens.pop(scope)

    def propose(
        self, scope: str, context: list[int], k: int, max_match: int
    ) -> tuple[int, list[int]]:
        documents = self._documents.get(scope)
        if not documents:
            return 0, []
        self._documents.move_to_end(scope)
        automaton = self._automata.get(scope)
        if automaton is None:
            automaton = self._automata[scope] = SuffixAutomaton()
            for document in documents:
                automaton.add_document(document)
        return automaton.propose(context, k, max_match)
