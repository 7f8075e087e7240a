"""The draft-free proposers: n-gram prompt lookup and the per-tenant suffix cache."""

from __future__ import annotations

import pytest

from engine.spec_decode.ngram import NgramIndex
from engine.spec_decode.suffix_cache import SuffixAutomaton, SuffixCache


def test_ngram_proposes_what_followed_the_longest_most_recent_match():
    index = NgramIndex(min_n=2, max_n=4)
    #          0  1  2  3  4  5  6  7  8  9 10 11
    tokens = [1, 2, 3, 9, 9, 0, 2, 3, 7, 8, 1, 2, 3]
    # "2 3" ends at 2 and 7; "1 2 3" only at 2: the longer match wins over the more recent.
    assert index.propose(tokens, 3) == (3, [9, 9, 0])
    tokens += [5, 6, 2, 3]  # now "2 3" again, preceded by 6: no 3-gram match, most recent 2-gram
    assert index.propose(tokens, 2) == (2, [5, 6])


def test_ngram_proposes_nothing_without_an_earlier_occurrence():
    index = NgramIndex(min_n=2, max_n=4)
    assert index.propose([1, 2, 3, 4], 5) == (0, [])
    assert index.propose([7], 5) == (0, [])
    assert index.propose([1, 2, 1, 2], 0) == (0, [])


def test_ngram_index_follows_a_growing_sequence():
    index = NgramIndex(min_n=2, max_n=8)
    tokens = list(range(10))
    assert index.propose(tokens, 4) == (0, [])
    tokens += [3, 4]  # "3 4" seen before, followed by 5 6 7 8
    assert index.propose(tokens, 4) == (2, [5, 6, 7, 8])
    tokens += [5, 6, 7]
    assert index.propose(tokens, 3) == (5, [8, 9, 3])


def test_suffix_automaton_finds_the_longest_suffix_and_its_continuation():
    sam = SuffixAutomaton()
    sam.add_document([10, 11, 12, 13, 14, 15])
    sam.add_document([20, 12, 13, 30])
    # The context ends with "11 12 13": only the first document has it.
    assert sam.propose([5, 11, 12, 13], k=2, max_match=8) == (3, [14, 15])
    # "12 13" alone occurs in both; the match stops at document ends (no crossing).
    length, proposal = sam.propose([99, 12, 13], k=5, max_match=8)
    assert length == 2 and proposal in ([14, 15], [30])
    assert sam.propose([15], k=3, max_match=8) == (1, [])  # a document's last token
    assert sam.propose([77, 78], k=3, max_match=8) == (0, [])


def test_suffix_automaton_agrees_with_brute_force_on_random_text():
    import random

    rng = random.Random(0)
    docs = [[rng.randrange(4) for _ in range(rng.randint(5, 30))] for _ in range(6)]
    sam = SuffixAutomaton()
    for doc in docs:
        sam.add_document(doc)
    for _ in range(200):
        context = [rng.randrange(4) for _ in range(rng.randint(1, 12))]
        length, proposal = sam.propose(context, k=3, max_match=12)
        best = 0
        for doc in docs:
            for end in range(len(doc)):
                n = 0
                while n < len(context) and n <= end and doc[end - n] == context[-1 - n]:
                    n += 1
                best = max(best, n)
        assert length == best
        if length:  # the proposal continues a real occurrence of the matched suffix
            suffix = context[-length:]
            assert any(
                doc[i : i + length + len(proposal)] == suffix + proposal
                for doc in docs
                for i in range(len(doc))
            )


def test_suffix_cache_never_proposes_another_scopes_output():
    cache = SuffixCache()
    secret = list(range(100, 140))
    cache.add("tenant-a", secret)
    assert cache.propose("tenant-a", [7, 100, 101, 102, 103], 4, 32) == (4, [104, 105, 106, 107])
    assert cache.propose("tenant-b", [7, 100, 101, 102, 103], 4, 32) == (0, [])
    assert cache.propose("", [100, 101, 102, 103], 4, 32) == (0, [])


def test_suffix_cache_memory_is_bounded_per_scope_and_in_total():
    cache = SuffixCache(max_tokens_per_scope=100, max_total_tokens=250)
    for i in range(5):
        cache.add("a", [1000 * i + j for j in range(40)])
    # Only the newest outputs of "a" that fit in 100 tokens are kept, and still found.
    assert cache.num_total_tokens <= 100
    assert cache.propose("a", [4000, 4001], 2, 32)[1] == [4002, 4003]
    assert cache.propose("a", [0, 1], 2, 32) == (0, [])  # the oldest was dropped
    for scope in ("b", "c", "d"):
        cache.add(scope, list(range(90)))
    assert cache.num_total_tokens <= 250
    assert cache.propose("a", [4000, 4001], 2, 32) == (0, [])  # least recently used: evicted
    assert cache.propose("d", [5, 6], 2, 32)[1] == [7, 8]


@pytest.fixture
def extended(monkeypatch) -> list[int]:
    """Every token added to any suffix automaton from now on."""
    tokens: list[int] = []
    original = SuffixAutomaton._extend
    monkeypatch.setattr(
        SuffixAutomaton,
        "_extend",
        lambda self, token: tokens.append(token) or original(self, token),
    )
    return tokens


def test_a_full_scope_adds_each_output_token_once(extended):
    """Past its bound, a scope drops old outputs without rebuilding from the rest: that rebuild
    at every finished request made a busy tenant's flood several times slower."""
    cache = SuffixCache(max_tokens_per_scope=1000)
    outputs = [[10_000 * i + j for j in range(16)] for i in range(500)]  # 8x the bound
    for output in outputs:
        cache.add("busy", output)
        cache.propose("busy", output[:4], 4, 32)
    assert len(extended) == sum(len(o) + 1 for o in outputs)  # each token and one separator
    assert cache.num_total_tokens <= 1000
    assert cache.propose("busy", outputs[-1][:4], 3, 32) == (4, outputs[-1][4:7])


def test_outputs_of_a_busy_spell_are_built_only_as_far_as_the_scope_holds(extended):
    """With no lookups (a busy engine proposes no drafts) outputs wait in the scope's queue,
    and only the newest that fit its bound are ever added to the automata."""
    cache = SuffixCache(max_tokens_per_scope=1000)
    cache.add("busy", list(range(50_000, 50_016)))
    assert cache.propose("busy", [50_000, 50_001, 50_002, 50_003], 2, 32) == (4, [50_004, 50_005])
    extended.clear()
    outputs = [[10_000 * i + j for j in range(16)] for i in range(500)]
    for output in outputs:
        cache.add("busy", output)
    assert cache.num_total_tokens <= 1000
    assert cache.propose("busy", outputs[-1][:4], 3, 32) == (4, outputs[-1][4:7])
    assert cache.propose("busy", outputs[-62][:4], 3, 32) == (4, outputs[-62][4:7])
    assert cache.propose("busy", [50_000, 50_001, 50_002, 50_003], 2, 32) == (0, [])
    assert len(extended) <= 1000 + 1000 // 16  # one scope's worth of tokens and separators


def test_a_lookup_builds_a_bounded_share_of_the_queue_the_oldest_first(monkeypatch):
    """After a busy spell a scope catches up over several lookups, none of which builds more
    than BUILD_TOKENS, rather than one lookup stalling its step for the whole queue."""
    from engine.spec_decode import suffix_cache

    monkeypatch.setattr(suffix_cache, "BUILD_TOKENS", 64)
    built = []
    original = SuffixAutomaton.add_document
    monkeypatch.setattr(
        SuffixAutomaton,
        "add_document",
        lambda self, tokens: built.append(len(tokens)) or original(self, tokens),
    )
    cache = SuffixCache(max_tokens_per_scope=1000)
    outputs = [[10_000 * i + j for j in range(16)] for i in range(40)]
    for output in outputs:
        cache.add("busy", output)
    lookups = 0
    while cache.propose("busy", outputs[-1][:4], 3, 32) != (4, outputs[-1][4:7]):
        lookups += 1
        assert sum(built) == 64 * lookups  # four outputs a lookup, in their order
    assert lookups == 9  # the last output is in the tenth lookup's share
    assert cache.propose("busy", outputs[0][:4], 3, 32) == (4, outputs[0][4:7])


def _brute_force_lookup(tokens: list[int], k: int, min_n: int, max_n: int):
    """Prompt lookup by scanning: the longest match among the latest MAX_CANDIDATES earlier
    occurrences of the last min_n tokens, the most recent among equally long ones."""
    from engine.spec_decode.ngram import MAX_CANDIDATES

    last = len(tokens) - 1
    suffix = tokens[last - min_n + 1 :]
    ends = [e for e in range(min_n - 1, last) if tokens[e - min_n + 1 : e + 1] == suffix]
    best_len, best_end = 0, -1
    for end in reversed(ends[-MAX_CANDIDATES:]):
        length = min_n
        while (
            length < max_n and end - length >= 0 and tokens[end - length] == tokens[last - length]
        ):
            length += 1
        if length > best_len:
            best_len, best_end = length, end
    return (best_len, tokens[best_end + 1 : best_end + 1 + k]) if best_end >= 0 else (0, [])


def test_ngram_index_agrees_with_a_scan_as_a_sequence_grows():
    import random

    rng = random.Random(1)
    for min_n in (1, 2, 3):
        index = NgramIndex(min_n=min_n, max_n=6)
        # A small alphabet repeats n-grams often; ids near the top of a 2M vocabulary too.
        alphabet = [0, 1, 2, 3, 151_000, 2**21 - 1]
        tokens = [rng.choice(alphabet) for _ in range(40)]
        for _ in range(60):
            assert index.propose(tokens, 4) == _brute_force_lookup(tokens, 4, min_n, 6)
            tokens += [rng.choice(alphabet) for _ in range(rng.choice([1, 1, 2, 7]))]
