"""Served models as the API sees them: lookup under a tenant's grants, and tokenizer caching.

LoRA adapters are models too, as in vLLM: ``model="<adapter>"`` names a ready adapter granted
to the caller's tenant, served by its base model's engines. ``resolve_model(...,
with_adapters=True)`` returns such an entry with ``adapter`` set (what the engine needs to load
it: name, checksum, path), ``engine_model`` naming the base model's request stream, and ``path``
the base checkpoint (the adapter shares its tokenizer). Adapters of other tenants, unknown and
not ready ones are all the same 404, so adapter names do not leak across tenants.

Lookups read this process's catalog snapshot (controlplane/catalog/cache.py): no
database query per request, and a change reaches every process within about a second.

A ready adapter is *validated*; it is *serving* once a live engine of its base model lists it
(this version) in its status record. ``visible_models`` (/v1/models, the playground) lists only
serving adapters, read from the engine statuses the API caches for admission (no extra Redis
round trip per request); ``resolve_model`` knows every validated one, and a request for an
adapter no live engine holds yet is refused with 503 and Retry-After (``AdapterLoading``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import redis
from asgiref.sync import sync_to_async

from controlplane.access.principals import Principal, can_use_model
from controlplane.adapters.selectors import AdapterRoute
from controlplane.catalog.cache import CatalogModel, acatalog_snapshot
from engine.text.tokenizer import ChatTokenizer
from inference.errors import model_not_found
from inference.transport import EmbeddingTokenizer, EngineClient


@dataclass(frozen=True)
class ModelEntry:
    name: str
    path: str
    max_model_len: int
    created: int
    is_embedding: bool
    # Set when ``name`` is a LoRA adapter (then ``path``/``max_model_len`` are its base's).
    adapter: AdapterRoute | None = None
    completions_only: bool = False  # a base model without chat template (an adapter's base)
    tool_parser: str = "hermes"  # the format of the model's own tool calls (inference/tools)
    reasoning_parser: str = ""  # how its thinking is told from its answer (inference/reasoning)
    # Drop Claude Code's attribution line from Messages system prompts (inference/messages/).
    drop_attribution_header: bool = True
    is_cross_encoder: bool = False  # a reranker (pooling engine): pair scores, no embeddings

    @property
    def engine_model(self) -> str:
        """The served model whose engines run this entry (its request stream)."""
        return self.adapter.base_model if self.adapter is not None else self.name

    @property
    def parent(self) -> str | None:
        """The base model of an adapter, as /v1/models reports it (vLLM's ``parent``)."""
        return self.adapter.base_model if self.adapter is not None else None


def _entry(model: CatalogModel) -> ModelEntry:
    return ModelEntry(
        name=model.name,
        path=model.path,
        max_model_len=model.max_model_len,
        created=model.created,
        is_embedding=model.is_embedding,
        completions_only=model.completions_only,
        tool_parser=model.tool_parser,
        reasoning_parser=model.reasoning_parser,
        drop_attribution_header=model.drop_attribution_header,
        is_cross_encoder=model.is_cross_encoder,
    )


def _adapter_entry(route: AdapterRoute, base: CatalogModel) -> ModelEntry:
    return ModelEntry(
        name=route.name,
        path=base.path,
        max_model_len=base.max_model_len,
        created=route.created,
        is_embedding=False,
        adapter=route,
        completions_only=base.completions_only,
        tool_parser=base.tool_parser,
        reasoning_parser=base.reasoning_parser,
        drop_attribution_header=base.drop_attribution_header,
    )


async def visible_models(principal: Principal, *, with_adapters: bool = False) -> list[ModelEntry]:
    """Every active model this caller may use, ordered by name; then, with ``with_adapters``,
    the adapters granted to its tenant that a live engine serves (ordered by name, each after
    the base models)."""
    catalog = await acatalog_snapshot()
    entries = [_entry(m) for name, m in catalog.models.items() if can_use_model(principal, name)]
    if with_adapters:
        for route in catalog.adapter_routes(tenant_id=principal.tenant_id):
            if await _serving(route):
                entries.append(_adapter_entry(route, catalog.models[route.base_model]))
    return entries


async def _serving(route: AdapterRoute) -> bool:
    """Has a live engine of the adapter's base model loaded this version of it?"""
    try:
        capacity = EngineClient.for_process().capacity
        return await capacity.holds_adapter(route.base_model, route.name, route.checksum)
    except redis.RedisError:  # engines cannot be asked: nothing is confirmed serving
        return False


async def resolve_model(
    principal: Principal, name: str, *, with_adapters: bool = False
) -> ModelEntry:
    """The served model ``name`` if it exists and this caller may use it; with
    ``with_adapters``, else the adapter ``name`` if granted to the caller's tenant and ready;
    404 otherwise."""
    catalog = await acatalog_snapshot()
    model = catalog.models.get(name)
    if model is not None and can_use_model(principal, name):
        return _entry(model)
    if with_adapters:
        route = catalog.adapter_route(tenant_id=principal.tenant_id, name=name)
        if route is not None:
            return _adapter_entry(route, catalog.models[route.base_model])
    raise model_not_found(name)


_tokenizers: dict[str, ChatTokenizer] = {}
# Held while a tokenizer loads. Requests that arrive together find the cache empty together:
# the Batch API's worker starts up to 256 lines of a batch at once, and each used to load its
# own copy (1 ms of CPU for the tiny test model's tokenizer, 23 ms for all-MiniLM-L6-v2's
# 30,000-token vocabulary, so seconds of a worker's CPU for a real model's). The others now
# wait for the one load.
_loading = threading.Lock()


def _load_tokenizer(path: str) -> ChatTokenizer:
    with _loading:
        tokenizer = _tokenizers.get(path)
        if tokenizer is None:
            tokenizer = _tokenizers[path] = ChatTokenizer(path)
        return tokenizer


async def tokenizer_for(entry: ModelEntry) -> ChatTokenizer:
    """One tokenizer per checkpoint path and process (loading one reads files: off the loop)."""
    tokenizer = _tokenizers.get(entry.path)
    if tokenizer is None:
        tokenizer = await sync_to_async(_load_tokenizer, thread_sensitive=False)(entry.path)
    return tokenizer


_embedding_tokenizers: dict[str, EmbeddingTokenizer] = {}


def embedding_tokenizer_for(entry: ModelEntry) -> EmbeddingTokenizer:
    """The encoder's tokenizer, without the fixed padding its tokenizer.json may ask for."""
    tokenizer = _embedding_tokenizers.get(entry.path)
    if tokenizer is None:
        tokenizer = _embedding_tokenizers[entry.path] = EmbeddingTokenizer(entry.path)
    return tokenizer


def embedding_max_length(entry: ModelEntry) -> int:
    """Longest input an embeddings model takes: its ``max_model_len``, capped by
    sentence_bert_config.json's ``max_seq_length`` (rows registered before registration read
    it carry the position-table length)."""
    config = Path(entry.path) / "sentence_bert_config.json"
    if config.is_file():
        limit = json.loads(config.read_text()).get("max_seq_length") or entry.max_model_len
        return min(int(limit), entry.max_model_len)
    return entry.max_model_len
