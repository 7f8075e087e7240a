"""Reading a GGUF file's metadata once, and fast: what a conversion spent most of its time on.

The ``gguf`` package parses every metadata value through slices of a numpy memmap, whose
slicing runs in Python (``memmap.__getitem__`` and ``__array_finalize__``): 2.9 s for
SmolLM2's 49k vocabulary strings and merges, where slices of a plain array over the same
mapped bytes take 1.3 s. And transformers parses the file again, with a reader of its own,
for the config and once more for the tokenizer. ``ArrayGGUFReader`` is the faster reader;
inside ``metadata_read_once`` transformers gets that same reader and parses nothing itself.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from gguf import GGUFReader


class ArrayGGUFReader(GGUFReader):
    """GGUFReader over a plain ndarray view of its memmap: the same bytes, mapped the same
    way (nothing is read into memory up front), with slicing in C. Tensors' ``data`` are
    read-only ndarray views then, as they were read-only memmap views."""

    @property
    def data(self) -> np.ndarray:
        return self._array

    @data.setter
    def data(self, value: np.ndarray) -> None:  # GGUFReader.__init__ sets its memmap here
        self._array = value.view(np.ndarray)


@contextlib.contextmanager
def metadata_read_once(reader: GGUFReader, path: str | Path) -> Iterator[None]:
    """Inside the block, transformers reads ``path`` through ``reader`` and parses its metadata
    once for all its callers.

    Its config loader and AutoTokenizer (which loads the config again for itself) each call
    ``load_gguf_checkpoint``, which opens the file with ``gguf.GGUFReader``. Both names are
    looked up in their modules at call time, so here the first call gets ``reader`` and the
    second a copy of the first's result. Outside the block nothing is changed."""
    import gguf
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    read, open_reader = gguf_utils.load_gguf_checkpoint, gguf.GGUFReader
    ours = Path(path).resolve()
    parsed: dict[str, dict] = {}

    def reader_of(file, *args, **kwargs):
        if not args and not kwargs and Path(file).resolve() == ours:
            return reader
        return open_reader(file, *args, **kwargs)

    def read_once(file, return_tensors=False, *args, **kwargs):
        if return_tensors or args or kwargs:
            return read(file, return_tensors, *args, **kwargs)
        if str(file) not in parsed:
            parsed[str(file)] = read(file, return_tensors=False)
        return copy.deepcopy(parsed[str(file)])  # callers may change what they get

    gguf_utils.load_gguf_checkpoint, gguf.GGUFReader = read_once, reader_of
    try:
        yield
    finally:
        gguf_utils.load_gguf_checkpoint, gguf.GGUFReader = read, open_reader
