"""Chained sha256 block hashes for prefix caching.

A full block's hash covers (parent block's hash, the block's token ids, extra keys). Chaining
means a hash names the whole prefix up to and including the block, so one dictionary lookup
per block finds the longest cached prefix. The extra keys are the cache salt and the LoRA
adapter identity: two tenants (different salts) or two adapters never share a block, even for
the same tokens. sha256, not Python's ``hash``: tenants share one process, and a collision
would hand one tenant's KV to another.
"""

from __future__ import annotations

import hashlib
import json
import struct
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.adapters import AdapterIdentity
    from engine.request import Request

# Parent of a request's first block: a fixed value, so hashes are stable across processes.
ROOT_HASH = hashlib.sha256(b"llm-platform/prefix-cache/v1").digest()


@lru_cache(maxsize=4096)
def extra_keys(cache_salt: str | None, adapter: AdapterIdentity | None) -> bytes:
    """Unambiguous bytes for the salt and adapter (JSON, so no separator can be forged)."""
    adapter_key = None if adapter is None else [adapter.name, adapter.checksum]
    return json.dumps([cache_salt, adapter_key], separators=(",", ":")).encode()


def hash_block(parent: bytes, token_ids: Sequence[int], extra: bytes) -> bytes:
    digest = hashlib.sha256(parent)
    digest.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    digest.update(extra)
    return digest.digest()


def update_block_hashes(request: Request, block_size: int) -> None:
    """Hash every block of ``request`` that became full since the last call."""
    hashes = request.block_hashes
    num_full = request.num_tokens // block_size
    if len(hashes) >= num_full:
        return
    extra = extra_keys(request.cache_salt, request.adapter)
    tokens = request.all_token_ids
    parent = hashes[-1] if hashes else ROOT_HASH
    for i in range(len(hashes), num_full):
        parent = hash_block(parent, tokens[i * block_size : (i + 1) * block_size], extra)
        hashes.append(parent)
