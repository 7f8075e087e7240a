"""Keep the C allocator from handing large buffers back to the kernel between steps.

A CPU step allocates activations of tens of megabytes (a 2,048-token prefill of a
1,024-wide model makes [2048, 6144] gate/up outputs, 25 MB) and frees them a moment later.
glibc serves blocks above its mmap threshold with a fresh ``mmap`` and returns them with
``munmap``, so each such buffer is page-faulted in again, 4 KiB at a time, every layer of every
step: on a 2-core VM that was 17% of a prefill step. Raising the threshold to its maximum
(32 MiB on 64-bit) and never trimming the heap keeps those pages mapped and reused, as the
tcmalloc vLLM's CPU build preloads does. The cost is that the engine's resident memory stays
at its high-water mark, which the KV cache already dominates.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import sys
from collections.abc import Iterator

logger = logging.getLogger(__name__)

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MAX_MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's upper bound on 64-bit (HEAP_MAX_SIZE / 2)
_LOADING_MMAP_THRESHOLD = 256 * 1024


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    # musl and others have neither mallopt nor malloc_trim
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.malloc_trim.argtypes = (ctypes.c_size_t,)
    return libc


def keep_freed_memory_mapped() -> bool:
    """Tune glibc's malloc for the engine process; False where there is no glibc to tune."""
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    ok = mallopt(_M_MMAP_THRESHOLD, _MAX_MMAP_THRESHOLD) == 1
    # The largest int: never give the top of the heap back (trimming is what re-faults it).
    ok = mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1 and ok
    if not ok:
        logger.debug("mallopt refused the engine's allocator settings")
    return ok


@contextlib.contextmanager
def loading_allocator() -> Iterator[None]:
    """Around loading a model on a CPU: every large block gets a map of its own, returned to
    the kernel when freed, and afterwards the engine's settings above.

    With those settings from the start, each layer's float weights read to be quantized or
    packed, and a tied LM head's whole float table, stayed in the heap once freed: holes
    between what the model keeps, never trimmed. SmolLM2-135M int4's engine held 90 to 270 MiB
    of them, depending on where the allocator placed the copies, and peaked higher still. A
    fixed 256 KiB threshold (which also stops glibc raising it as maps are freed) keeps the
    float copies out of the heap; ``malloc_trim(0)`` then hands back what smaller ones left.
    """
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, _LOADING_MMAP_THRESHOLD)
    try:
        yield
    finally:
        if libc is not None:
            libc.malloc_trim(0)
        keep_freed_memory_mapped()
