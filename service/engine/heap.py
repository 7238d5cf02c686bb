"""The process's heap (glibc's malloc): what the engine asks of it, and gives back.

Every decoder step makes arrays of a few hundred KB to a few MB: the step's log-probs (rows x
vocabulary), the caches as they grow, the beams' reordered rows. glibc serves an allocation that
large with fresh pages from the kernel (mmap) and returns them when it is freed, so each step faults
its arrays in again, page by page. On the shipped int8 model, one thread, 20 tokens, that was 1,409
page faults a call at greedy x 16 and 1,822-2,259 at beam 4 x 16; with the heap kept, 2-8, at the
same peak RSS (131-132 MB). Elsewhere than glibc both calls do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
MAX_REUSE_BYTES = 32 << 20  # glibc's ceiling for the mmap threshold on 64-bit systems


def reuse_freed_memory(limit: int) -> bool:
    """Serve allocations under `limit` bytes from the heap, and keep up to twice that freed at its top
    for the next ones, instead of pages mapped and unmapped for each (0: glibc's own policy). For the
    whole process, from now on; whether glibc took it."""
    if not 0 < limit <= MAX_REUSE_BYTES:
        return False
    mallopt = _libc("mallopt")
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, limit)) and bool(mallopt(M_TRIM_THRESHOLD, 2 * limit))


def release_freed_memory() -> None:
    """Hand the heap that reading and rewriting a graph freed back to the system (glibc's malloc_trim;
    elsewhere nothing). glibc keeps it otherwise: at OPUS-MT size, int8, a process held 259 MB after
    loading fused against 177 as written, and 170 with this."""
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)


@functools.cache
def _libc(function: str) -> Any | None:
    """One of glibc's functions, looked up once (find_library runs ldconfig); None elsewhere."""
    name = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(name), function, None) if name else None
