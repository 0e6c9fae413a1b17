"""Let freed large arrays be reused instead of returned to the kernel and faulted in again.

glibc serves large allocations with fresh mmap()s and unmaps them on free, so a
forward pass that makes hundreds of new arrays pays a page fault per 4 KiB each
time. Raising the mmap and trim thresholds keeps freed memory in the heap for
the next step or run. It is process-wide, so only entry points that own the
process (the CLI, the benchmark) call it; the library never does.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def reuse_freed_memory() -> bool:
    """True when glibc accepted the settings; False elsewhere (macOS, musl), which is harmless."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = libc.mallopt if libc is not None else None
    except (OSError, AttributeError):
        return False
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 512 * 1024 * 1024) and mallopt(_M_TRIM_THRESHOLD, 1024 * 1024 * 1024))
