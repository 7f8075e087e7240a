"""The Speculator: decides, per step and per decoding request, whether to propose draft tokens
and which, and learns from what verification accepted.

Proposals come from the request's own prompt and output (n-gram lookup) and, when that finds
no long match, from its tenant's recent outputs (the suffix cache, scoped by the cache salt).
Backing off, so that speculation never costs throughput:
- under load: no proposals in a step with more than ``max_num_seqs`` running sequences (a
  large batch already fills the machine; verifying drafts would only add work), and in any
  step at most ``num_speculative_tokens + 1`` tokens of decoding sequences in all (one per
  sequence, the rest drafts): a step stays as cheap as a small decode batch (on CPU, up to 8
  rows run the quantized matrix-vector kernels; more would dequantize whole matrices);
- per request, on low acceptance: the draft length follows acceptance (doubles after a fully
  accepted draft, shrinks to what was accepted plus one otherwise), and a draft with nothing
  accepted pauses proposals for 1, 3, 7, ... steps (at most ``MAX_PAUSE``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.spec_decode.ngram import NgramIndex
from engine.spec_decode.suffix_cache import SuffixCache

if TYPE_CHECKING:
    from engine.core.kv_cache_manager import KVCacheManager
    from engine.request import Request

# Prompt lookup matches the last 2..8 tokens: shorter matches propose mostly noise.
NGRAM_MIN, NGRAM_MAX = 2, 8
# The suffix cache spans many outputs, so its matches must be longer to be trusted.
SUFFIX_MIN_MATCH, SUFFIX_MAX_MATCH = 4, 32
MAX_PAUSE = 32  # steps without proposals after repeated drafts with nothing accepted


@dataclass(slots=True)
class SpecState:
    """One sequence's speculation: its n-gram index, this step's drafts, its backoff and its
    counts (reported in the request's usage)."""

    index: NgramIndex
    num_speculative_tokens: int  # the draft length to propose next
    draft_token_ids: list[int] = field(default_factory=list)
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_misses: int = 0  # drafts in a row with nothing accepted
    pause: int = 0  # steps left without proposals


@dataclass(slots=True)
class DraftOutcome:
    """What verification made of one request's drafts (engine/spec_decode/verify.py)."""

    num_draft_tokens: int
    accepted_token_ids: list[int]  # the accepted drafts, emitted before the sampled token
    accepted_logprobs: list  # TokenLogprobs of each accepted draft, or Nones

    @property
    def num_rejected(self) -> int:
        return self.num_draft_tokens - len(self.accepted_token_ids)


class Speculator:
    def __init__(
        self,
        *,
        num_speculative_tokens: int,
        max_num_seqs: int,
        max_model_len: int,
        suffix_cache: SuffixCache | None = None,
    ) -> None:
        self.num_speculative_tokens = num_speculative_tokens
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.suffix_cache = suffix_cache if suffix_cache is not None else SuffixCache()
        self.step_budget = 0  # draft tokens this step may still take
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0

    def attach(self, request: Request) -> None:
        if request.spec is None and request.sampling_params.speculative_decoding:
            request.spec = SpecState(NgramIndex(NGRAM_MIN, NGRAM_MAX), self.num_speculative_tokens)

    def begin_step(self, num_running: int) -> None:
        if num_running > self.max_num_seqs:
            self.step_budget = 0
        else:
            self.step_budget = self.num_speculative_tokens + 1 - num_running

    def propose(self, request: Request, budget: int, kv_cache: KVCacheManager) -> int:
        """Store up to ``budget`` draft tokens on a decoding request and allocate their KV
        slots; return how many. Drafts never take blocks another request would have to give
        up: when the blocks are not free, there are none."""
        spec = request.spec
        if spec is None:
            return 0
        spec.draft_token_ids = []
        if self.step_budget <= 0 or request.num_tokens - request.num_computed_tokens != 1:
            return 0
        if spec.pause:
            spec.pause -= 1
            return 0
        # Drafts past max_tokens or the context could never be emitted.
        k = min(
            spec.num_speculative_tokens,
            budget,
            self.step_budget,
            request.max_tokens - request.num_output_tokens - 1,
            self.max_model_len - request.num_tokens - 1,
        )
        if k <= 0:
            return 0
        drafts = self._lookup(request, spec, k)
        if drafts and request.grammar is not None:
            # Only what the grammar allows: a refused draft could never be accepted.
            drafts = drafts[: request.grammar.matcher.validate_tokens(drafts)]
        if drafts and kv_cache.allocate_slots(request, 1 + len(drafts)) is None:
            drafts = []
        spec.draft_token_ids = drafts
        self.step_budget -= len(drafts)
        return len(drafts)

    def _lookup(self, request: Request, spec: SpecState, k: int) -> list[int]:
        tokens = request.all_token_ids
        length, drafts = spec.index.propose(tokens, k)
        if length < NGRAM_MAX:
            scope = request.cache_salt or ""
            cached_len, cached = self.suffix_cache.propose(scope, tokens, k, SUFFIX_MAX_MATCH)
            if cached_len >= SUFFIX_MIN_MATCH and cached_len > length:
                drafts = cached
        return drafts

    def on_verified(self, request: Request, outcome: DraftOutcome) -> None:
        spec = request.spec
        num_draft, num_accepted = outcome.num_draft_tokens, len(outcome.accepted_token_ids)
        spec.draft_token_ids = []
        spec.num_drafts += 1
        spec.num_draft_tokens += num_draft
        spec.num_accepted_tokens += num_accepted
        self.num_drafts += 1
        self.num_draft_tokens += num_draft
        self.num_accepted_tokens += num_accepted
        if num_accepted == num_draft:
            spec.num_misses = 0
            spec.num_speculative_tokens = min(self.num_speculative_tokens, 2 * num_draft)
        elif num_accepted == 0:
            spec.num_misses += 1
            spec.pause = min(2**spec.num_misses - 1, MAX_PAUSE)
            spec.num_speculative_tokens = max(1, spec.num_speculative_tokens // 2)
        else:
            spec.num_misses = 0
            spec.num_speculative_tokens = num_accepted + 1

    def on_finished(self, request: Request) -> None:
        """Remember the output for the tenant's later requests."""
        if request.spec is not None and request.output_token_ids:
            self.suffix_cache.add(request.cache_salt or "", request.output_token_ids)

    def totals(self) -> dict[str, int]:
        """The engine's speculation counters, as its status record names them."""
        return {
            "spec_decode_num_drafts": self.num_drafts,
            "spec_decode_num_draft_tokens": self.num_draft_tokens,
            "spec_decode_num_accepted_tokens": self.num_accepted_tokens,
        }
