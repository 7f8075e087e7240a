"""Which declared shared prefix a prompt starts with (controlplane/shared_prefixes/).

The matched prefix's whole KV blocks are cached under its public salt, so every tenant sending
it reuses them (engine/core/block_hash.py); the rest of the prompt stays under the tenant's
salt. Matching is on token ids, after the chat template, so it can never be fooled by text that
merely looks alike, and it is cheap on the hot path: each model's declared prefixes are rendered
and tokenized once per catalog snapshot (so a change reaches every API process with the catalog
epoch, within about a second), and indexed by their first ``HEAD`` tokens, so a prompt costs one
dictionary lookup and, on a hit, one list comparison in C.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from controlplane.catalog.cache import CatalogSnapshot
from controlplane.shared_prefixes.selectors import SharedPrefixRecord
from engine.text.tokenizer import ChatTokenizer
from inference.tools import ToolSetup, template_input

if TYPE_CHECKING:
    from inference.generation.plan import GenerationPlan

logger = logging.getLogger(__name__)

HEAD = 16  # tokens a prefix is indexed by; shorter prefixes are tried one by one
_MAX_TOKENIZED = 512  # (prefix, tokenizer) entries kept across snapshots


@dataclass(frozen=True, slots=True)
class SharedPrefixMatch:
    """A prompt starts with the declared prefix ``label``: its first ``num_tokens`` tokens."""

    label: str  # "name vN", for logs and traces
    salt: str
    num_tokens: int


class SharedPrefixIndex:
    """One model's declared prefixes as token ids, longest first within each head."""

    def __init__(self, entries: Sequence[tuple[list[int], SharedPrefixMatch]]):
        self._by_head: dict[tuple[int, ...], list[tuple[list[int], SharedPrefixMatch]]] = {}
        self._short: list[tuple[list[int], SharedPrefixMatch]] = []
        for token_ids, match in sorted(entries, key=lambda e: -len(e[0])):
            if len(token_ids) >= HEAD:
                self._by_head.setdefault(tuple(token_ids[:HEAD]), []).append((token_ids, match))
            elif token_ids:
                self._short.append((token_ids, match))

    def __bool__(self) -> bool:
        return bool(self._by_head or self._short)

    def match(self, token_ids: list[int]) -> SharedPrefixMatch | None:
        """The longest declared prefix ``token_ids`` starts with, or None."""
        candidates = self._by_head.get(tuple(token_ids[:HEAD]), ())
        for prefix, match in (*candidates, *self._short):
            if token_ids[: len(prefix)] == prefix:
                return match
        return None


def declared_token_ids(
    record: SharedPrefixRecord, tokenizer: ChatTokenizer, *, tool_parser: str
) -> list[list[int]]:
    """The token sequences a prompt starting with ``record`` begins with on this tokenizer.

    A chat prefix is its messages (and tools) rendered as a chat request renders them, without
    the generation prompt; a text prefix is its text, with the tokenizer's special tokens (as
    /v1/completions encodes by default) and without (a chat prompt or ``add_special_tokens``
    false)."""
    if record.kind == "text":
        variants = [
            tokenizer.encode(record.text, add_special_tokens=True),
            tokenizer.encode(record.text, add_special_tokens=False),
        ]
        return [v for i, v in enumerate(variants) if v and v not in variants[:i]]
    tools = ToolSetup.from_request(tools=record.tools, tool_choice=None, parser=tool_parser)
    messages, kwargs = template_input(record.messages, tools, tokenizer.chat_template)
    text = tokenizer.render_chat(messages, add_generation_prompt=False, **kwargs)
    return [tokenizer.encode(text, add_special_tokens=False)]


# (model, tokenizer path) -> (the snapshot's prefixes it was built from, the index)
_indexes: dict[tuple[str, str], tuple[tuple[SharedPrefixRecord, ...], SharedPrefixIndex]] = {}
_tokenized: dict[tuple[SharedPrefixRecord, str], list[list[int]]] = {}


def _tokenized_prefix(
    record: SharedPrefixRecord, tokenizer: ChatTokenizer, tool_parser: str
) -> list[list[int]]:
    key = (record, str(tokenizer.path))
    token_ids = _tokenized.get(key)
    if token_ids is None:
        try:
            token_ids = declared_token_ids(record, tokenizer, tool_parser=tool_parser)
        except Exception:  # a template that cannot render it: that prefix never matches here
            logger.warning("shared prefix %s does not render on %s", record.label, tokenizer.path)
            token_ids = []
        if len(_tokenized) >= _MAX_TOKENIZED:
            _tokenized.clear()
        _tokenized[key] = token_ids
    return token_ids


def index_for(
    catalog: CatalogSnapshot, *, model: str, tokenizer: ChatTokenizer, tool_parser: str
) -> SharedPrefixIndex:
    """``model``'s declared prefixes, built once per catalog snapshot (run it off the loop:
    the first call after a change renders and tokenizes them)."""
    key = (model, str(tokenizer.path))
    cached = _indexes.get(key)
    if cached is not None and cached[0] is catalog.shared_prefixes:
        return cached[1]
    entries = [
        (token_ids, SharedPrefixMatch(record.label, record.public_salt(model), len(token_ids)))
        for record in catalog.shared_prefixes
        if record.applies_to(model)
        for token_ids in _tokenized_prefix(record, tokenizer, tool_parser)
    ]
    index = SharedPrefixIndex(entries)
    _indexes[key] = (catalog.shared_prefixes, index)
    return index


def mark_shared_prefixes(
    plan: GenerationPlan,
    *,
    client_salt: str | None,
    catalog: CatalogSnapshot,
    tokenizer: ChatTokenizer,
    tool_parser: str,
) -> None:
    """Set ``plan.shared_prefixes``: per prompt, the declared prefix it starts with; and say so
    in the request's log line.

    A client that sent its own ``cache_salt`` asked for a narrower cache than its tenant's, so
    its prompts share nothing, declared prefixes included: a client salt never widens sharing.
    """
    if client_salt or not catalog.shared_prefixes:
        return
    model = plan.engine_model or plan.model
    index = index_for(catalog, model=model, tokenizer=tokenizer, tool_parser=tool_parser)
    if not index:
        return
    plan.shared_prefixes = [index.match(token_ids) for _text, token_ids in plan.prompts]
    for match in filter(None, plan.shared_prefixes):
        logger.info(
            "%s: shared prefix %s matched (%d tokens cached under its public salt)",
            plan.request_id,
            match.label,
            match.num_tokens,
        )
