"""Chained sha256 block hashes for prefix caching.

A full block's hash covers (parent block's hash, the block's token ids, extra keys). Chaining
means a hash names the whole prefix up to and including the block, so one dictionary lookup
per block finds the longest cached prefix. The extra keys are the cache salt and the LoRA
adapter identity: two tenants (different salts) or two adapters never share a block, even for
the same tokens. sha256, not Python's ``hash``: tenants share one process, and a collision
would hand one tenant's KV to another.

Salt regions: a request may carry a ``PublicPrefix`` (an operator-declared shared prefix the
API matched, docs/architecture.md "Shared prefixes"). Blocks lying wholly inside its first
``num_tokens`` tokens are hashed under its public salt, so every tenant sending that prefix
finds them; the block holding the boundary and every later one under the request's own salt,
so nothing after the boundary is ever shared across tenants. Public extra keys have another
shape than private ones, so no private salt can ever name a public block.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from array import array
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.adapters import AdapterIdentity
    from engine.request import Request

_TOKEN_BYTES = 8  # a token id as hashed: little-endian int64
assert array("q").itemsize == _TOKEN_BYTES

# Parent of a request's first block: a fixed value, so hashes are stable across processes.
ROOT_HASH = hashlib.sha256(b"llm-platform/prefix-cache/v1").digest()


@dataclass(frozen=True, slots=True)
class PublicPrefix:
    """The first ``num_tokens`` prompt tokens are a declared shared prefix, cached under ``salt``.

    The engine trusts it as it trusts ``cache_salt``: the API derives both on the server."""

    salt: str
    num_tokens: int

    def __post_init__(self) -> None:
        if not isinstance(self.salt, str) or not self.salt:
            raise ValueError("a public prefix needs a non-empty salt")
        if type(self.num_tokens) is not int or self.num_tokens <= 0:
            raise ValueError("a public prefix's num_tokens must be a positive integer")


def public_prefix_or_none(salt: str, num_tokens: int) -> PublicPrefix | None:
    """A message's shared-prefix fields as a PublicPrefix (ValueError when malformed); None
    when both are empty: the whole prompt is private."""
    return PublicPrefix(salt, num_tokens) if salt or num_tokens else None


@lru_cache(maxsize=4096)
def extra_keys(cache_salt: str | None, adapter: AdapterIdentity | None) -> bytes:
    """Unambiguous bytes for the salt and adapter (JSON, so no separator can be forged)."""
    adapter_key = None if adapter is None else [adapter.name, adapter.checksum]
    return json.dumps([cache_salt, adapter_key], separators=(",", ":")).encode()


@lru_cache(maxsize=1024)
def public_extra_keys(salt: str, adapter: AdapterIdentity | None) -> bytes:
    """Like ``extra_keys`` but a three-element list: never equal to any private one."""
    adapter_key = None if adapter is None else [adapter.name, adapter.checksum]
    return json.dumps(["public", salt, adapter_key], separators=(",", ":")).encode()


def hash_block(parent: bytes, token_ids: Sequence[int], extra: bytes) -> bytes:
    return _hash_packed(parent, struct.pack(f"<{len(token_ids)}q", *token_ids), extra)


def _hash_packed(parent: bytes, packed_tokens: bytes, extra: bytes) -> bytes:
    """sha256(parent, the block's tokens as little-endian int64, extra keys)."""
    return hashlib.sha256(parent + packed_tokens + extra).digest()


def _pack_tokens(token_ids: Sequence[int]) -> bytes:
    """Token ids as little-endian int64, the bytes ``hash_block`` hashes, packed at C speed:
    one call per prompt instead of one per block (an engine taking in a burst of long prompts
    hashes them all before its next step, and the API's router hashes each prompt too)."""
    packed = array("q", token_ids)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def update_block_hashes(request: Request, block_size: int) -> None:
    """Hash every block of ``request`` that became full since the last call."""
    hashes = request.block_hashes
    num_full = request.num_tokens // block_size
    if len(hashes) < num_full:
        hashes.extend(
            chain_block_hashes(
                request.all_token_ids,
                block_size,
                cache_salt=request.cache_salt,
                adapter=request.adapter,
                public_prefix=request.public_prefix,
                done=hashes,
                stop=num_full,
            )
        )


def chain_block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    *,
    cache_salt: str | None,
    adapter: AdapterIdentity | None,
    public_prefix: PublicPrefix | None,
    done: Sequence[bytes] = (),
    stop: int | None = None,
) -> list[bytes]:
    """The hashes of the full blocks of ``token_ids`` after the ``done`` ones (up to block
    ``stop``): what the engine files them under, so a router outside it can ask who holds a
    prompt's prefix (inference/transport/prefix_router.py)."""
    num_full = len(token_ids) // block_size if stop is None else stop
    extra = extra_keys(cache_salt, adapter)
    # Only blocks wholly inside the declared prefix are public (floor, never round up).
    num_public = public_prefix.num_tokens // block_size if public_prefix is not None else 0
    public_extra = public_extra_keys(public_prefix.salt, adapter) if num_public else extra
    parent = done[-1] if done else ROOT_HASH
    first = len(done)
    packed = _pack_tokens(token_ids[first * block_size : num_full * block_size])
    width = block_size * _TOKEN_BYTES
    hashes = []
    for i in range(first, num_full):
        block_extra = public_extra if i < num_public else extra
        start = (i - first) * width
        parent = _hash_packed(parent, packed[start : start + width], block_extra)
        hashes.append(parent)
    return hashes
