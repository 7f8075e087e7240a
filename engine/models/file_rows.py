"""An embedding table left in its checkpoint file, read a row per token as lookups need it.

Why: a quantized model keeps its projections and LM head in a few bits, but its embedding
table in float: SmolLM2-135M's is 49,152 x 576 float32, 108 MiB, more than its int4 layers
(66 MiB), while a stream of 300 tokens reads about 1 MiB of it. Mapping the file instead does
not keep the rest out of memory on current kernels: a fault maps the page cache's whole large
folio (up to 2 MiB), so 150 random tokens made 77 of the 108 MiB resident. Plain reads copy
just the rows asked for; the file's pages stay in the page cache, shared and reclaimable, and
never count against the engine. A row is a few KiB, so a decode step of 64 sequences costs
64 reads of about a microsecond each, against milliseconds of matmuls.

Used on a CPU when the loader converts the weights anyway (quantized or packed modes) and the
file stores the table in the engine's dtype.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch


class FileRows:
    """Rows ``[num_rows, dim]`` of ``dtype`` stored at ``offset`` in ``file``."""

    def __init__(self, file: Path, offset: int, shape: tuple[int, int], dtype: torch.dtype) -> None:
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self._offset = offset
        self._row_bytes = shape[1] * dtype.itemsize
        end = offset + shape[0] * self._row_bytes
        # Opened once: the engine reads the same file (inode) however the path changes later.
        self._fd = os.open(file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        if os.fstat(self._fd).st_size < end:
            os.close(self._fd)
            raise ValueError(f"{file} ends inside its embedding table")

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """``F.embedding(ids, table)``: ``[len(ids), dim]``; IndexError for an id out of range."""
        flat = ids.reshape(-1).tolist()
        out = torch.empty((len(flat), self.shape[1]), dtype=self.dtype)
        rows = out.view(torch.uint8).numpy()  # a row of it is a writable buffer
        num_rows = self.shape[0]
        for i, token in enumerate(flat):
            if not 0 <= token < num_rows:
                raise IndexError(f"token id {token} is out of range for {num_rows} embeddings")
            got = os.preadv(self._fd, [rows[i]], self._offset + token * self._row_bytes)
            if got != self._row_bytes:
                raise OSError(f"short read of embedding row {token}")
        return out.view(*ids.shape, self.shape[1])
