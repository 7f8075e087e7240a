"""Paged attention through the Triton kernels in kernels/ (the CUDA path).

Per step, ``prepare`` converts the index tensors to the int32 the kernels take (three small
copies shared by every layer) and rebases the prefill chunks' query offsets to start at 0.
Per layer, ``write_kv`` stores the step's K and V with ``kernels.reshape_and_cache`` and
``attend`` runs ``paged_decode_attention`` over the decode rows and ``paged_prefill_attention``
over the prefill chunks. Both kernels read every key from the cache, so a fresh prompt, a
prefix-cached prompt and a later chunk of a chunked prefill are one case.

Nothing here reads a device value back to the host: the kernels' grids are sized from the
Python copies of the lengths, so a decode step can be captured in a CUDA graph
(engine/worker/cuda_graphs.py), which prepares with ``max_model_len`` as the length bound.
"""

from __future__ import annotations

import torch

from engine.attention.backend import AttentionBackend, AttentionMetadata
from engine.device_copy import to_device


class TritonAttentionBackend(AttentionBackend):
    name = "triton"

    def __init__(self) -> None:
        import kernels

        reason = kernels.triton_unavailable_reason()
        if reason is not None:
            raise RuntimeError(f"the triton attention backend cannot run here: {reason}")
        self._kernels = kernels

    def prepare(self, metadata: AttentionMetadata) -> None:
        state = metadata.backend_state
        nd = metadata.num_decodes
        # .to() returns the tensor itself when it already is int32 (CUDA-graph static buffers).
        state["seq_lens"] = metadata.seq_lens.to(torch.int32)
        state["block_tables"] = metadata.block_tables.to(torch.int32)
        state["max_decode_len"] = max(metadata.seq_lens_list[:nd], default=0)
        qsl = metadata.query_start_loc
        if metadata.num_seqs > nd:
            first = qsl[nd]
            state["prefill_query_start_loc"] = to_device(
                [q - first for q in qsl[nd:]], torch.int32, metadata.block_tables.device
            )
            state["max_query_len"] = max(
                b - a for a, b in zip(qsl[nd:-1], qsl[nd + 1 :], strict=True)
            )

    def write_kv(self, key, value, k_cache, v_cache, metadata):
        self._kernels.reshape_and_cache(key, value, k_cache, v_cache, metadata.slot_mapping)

    def attend(self, query, key, value, k_cache, v_cache, metadata, scale):
        state = metadata.backend_state
        nd = metadata.num_decodes
        decode_out = prefill_out = None
        if nd:
            decode_out = self._kernels.paged_decode_attention(
                query[:nd],
                k_cache,
                v_cache,
                state["block_tables"][:nd],
                state["seq_lens"][:nd],
                scale,
                state["max_decode_len"],
            )
        if metadata.num_seqs > nd:
            prefill_out = self._kernels.paged_prefill_attention(
                query[nd:],
                k_cache,
                v_cache,
                state["block_tables"][nd:],
                state["prefill_query_start_loc"],
                state["seq_lens"][nd:],
                scale,
                state["max_query_len"],
            )
        if prefill_out is None:
            return decode_out
        if decode_out is None:
            return prefill_out
        return torch.cat((decode_out, prefill_out))
