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

import ctypes
import ctypes.util
import logging
import sys

logger = logging.getLogger(__name__)

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MAX_MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's upper bound on 64-bit (HEAP_MAX_SIZE / 2)


def keep_freed_memory_mapped() -> bool:
    """Tune glibc's malloc for the engine process; False where there is no glibc to tune."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    ok = mallopt(_M_MMAP_THRESHOLD, _MAX_MMAP_THRESHOLD) == 1
    # The largest int: never give the top of the heap back (trimming is what re-faults it).
    ok = mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1 and ok
    if not ok:
        logger.debug("mallopt refused the engine's allocator settings")
    return ok
