"""Let freed large arrays be reused instead of returned to the kernel and faulted in again.

glibc serves large allocations with fresh mmap()s and unmaps them on free, so a
forward pass that makes hundreds of new arrays pays a page fault per 4 KiB each
time. Raising the mmap and trim thresholds keeps freed memory in the heap for
the next step or run. It is process-wide; `load_model` applies it once (so the
Python API runs as fast as the command), as do the CLI and the benchmarks.

The C library is opened by name, never looked up with ctypes.util.find_library,
which runs `ldconfig -p` in a subprocess (0.5 s at every start of the command).
"""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_applied: bool | None = None  # the result of the first call; later calls repeat it


def _libc():
    """glibc's handle on Linux (already loaded into every process), else None."""
    if not sys.platform.startswith("linux"):
        return None
    for name in ("libc.so.6", None):  # None: the symbols of the running process itself
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def reuse_freed_memory() -> bool:
    """True when glibc accepted the settings; False elsewhere (macOS, musl), which is harmless. Idempotent."""
    global _applied
    if _applied is not None:
        return _applied
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    _applied = bool(mallopt is not None and mallopt(_M_MMAP_THRESHOLD, 512 * 1024 * 1024)
                    and mallopt(_M_TRIM_THRESHOLD, 1024 * 1024 * 1024))
    return _applied
