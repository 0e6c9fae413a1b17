"""The second core for the elementwise steps and the statistics, when OpenBLAS's own threads let it go.

NumPy releases the GIL in ufuncs and reductions on large arrays, so the rows of one tensor can be split over
two threads: each half is the same operations on the same numbers, so the same bits. That wins only if the
second core is free. After every matrix product OpenBLAS's worker threads spin for 2^28 CPU cycles (about
0.1 s) before they sleep, on the very core the second thread needs: with that default, splitting gains
nothing (measured, issue 20). OPENBLAS_THREAD_TIMEOUT shortens the spin to 2^N cycles. OpenBLAS reads it
when it loads and applies it when it starts its threads, so:

- `import tracer` before NumPy (the `tracer` command; a program that imports tracer first) sets the variable,
  unless the user did, and OpenBLAS starts with it;
- NumPy loaded first: `load_model` sets it the same way, has the loaded OpenBLAS read its environment again
  (`openblas_read_env`) and stops its threads (`blas_thread_shutdown_`, what OpenBLAS itself does before a
  fork); the next product starts them with the short spin. OpenBLAS's shared library exports both (NumPy's
  scipy-openblas 0.3.31 does, unprefixed); where either is missing nothing is changed.

Elsewhere (another BLAS, no such symbols) the elementwise steps stay on one thread, as before;
`two_threads()` says which.

Measured (GPT-2 small, 512 tokens, 7 rounds alternating in one process, AVX2 host): with the spin shortened,
two threads against one: bare forward 1.09 s against 1.18 s, statistics only 1.24 s against 1.49 s; with
OpenBLAS's default spin two threads lose (1.30 s against 1.22 s, 1.55 s against 1.48 s). The shorter spin
alone changes neither the products nor decoding beyond this host's noise: OpenBLAS's threads then cost
0.001 s of CPU in the 0.3 s after a product instead of 0.11 s, and the products run as fast.
"""

from __future__ import annotations

import contextvars
import functools
import os
import sys
import threading
from collections.abc import Callable

SPIN_VAR = "OPENBLAS_THREAD_TIMEOUT"
SPIN_LOG2_CYCLES = 16  # OpenBLAS's threads sleep after 2^16 cycles (~25 us) idle: back-to-back products keep them
MOST_SPIN = 20  # a timeout up to 2^20 cycles (~0.4 ms) still leaves the second core to us during a step
MIN_SPLIT_BYTES = 1 << 20  # below this, handing half a tensor to the other thread costs more than it saves

_parked: bool | None = None  # whether OpenBLAS's threads sleep soon after a product
_late = False  # NumPy (so OpenBLAS) was loaded before tracer: load_model parks its threads (park_loaded_blas)
_blas: str | None = None  # NumPy's BLAS, read at the first two_threads()
_pool = None
_pool_pid = 0  # the process that made _pool
_HELPER = "tracer-rows"  # the helper thread's name
_inside = threading.local()  # .active on both threads while they run a split: a split inside it runs whole


def park_blas_threads() -> None:
    """At `import tracer`: before NumPy loads, ask OpenBLAS to put its threads to sleep soon after each product
    (a value the user set is kept); after, leave it to park_loaded_blas."""
    global _parked, _late
    if _parked is not None or _late:
        return
    if "numpy" in sys.modules:
        _late = True
        return
    os.environ.setdefault(SPIN_VAR, str(SPIN_LOG2_CYCLES))
    _parked = _short(os.environ[SPIN_VAR])


def park_loaded_blas() -> bool:
    """Called by load_model: when NumPy came before tracer, the spin set in the OpenBLAS already loaded. Only
    while this is the process's one thread (besides tracer's helper): stopping OpenBLAS's threads under a
    product another thread is running would break it. Idempotent; returns whether OpenBLAS's threads now
    sleep soon after a product."""
    global _parked, _late
    if not _late:
        return bool(_parked)
    if any(t is not threading.current_thread() and not t.name.startswith(_HELPER) for t in threading.enumerate()):
        return False  # another thread might be inside a BLAS call: not now (a later load_model tries again)
    _late = False
    os.environ.setdefault(SPIN_VAR, str(SPIN_LOG2_CYCLES))
    libs = [lib for lib in map(_open, _loaded_openblas()) if lib is not None]
    for lib in libs:
        lib.openblas_read_env()  # reads OPENBLAS_THREAD_TIMEOUT (and its other variables) again
        lib.blas_thread_shutdown_()  # the next product starts the threads, with the timeout just read
    _parked = bool(libs) and _short(os.environ[SPIN_VAR])
    return _parked


def _short(value: str) -> bool:
    try:
        return int(value) <= MOST_SPIN
    except ValueError:
        return False


def _loaded_openblas() -> list[str]:
    """Paths of the OpenBLAS libraries mapped into this process (Linux: /proc/self/maps; elsewhere none)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[-1].strip() for line in maps if "openblas" in line.lower()}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/") and ".so" in os.path.basename(p))


def _open(path: str):
    """The library at `path` (already loaded: this only takes a handle), when it exports both calls."""
    import ctypes  # here: only this late path needs it (3 ms off `import tracer`)

    try:
        lib = ctypes.CDLL(path)
        lib.openblas_read_env, lib.blas_thread_shutdown_  # noqa: B018  (AttributeError when absent)
        return lib
    except (OSError, AttributeError):
        return None


@functools.cache
def cores() -> int:
    """The cores this process may run on (read once)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def two_threads() -> bool:
    """Split large elementwise steps and statistics over two threads: two cores, and BLAS threads that sleep
    (OpenBLAS's with the spin shortened, or Apple's Accelerate, whose threads never spin; MKL's spin 0.2 s)."""
    global _blas
    if _blas is None:
        _blas = _blas_name()
    return cores() >= 2 and (("openblas" in _blas and bool(_parked)) or "accelerate" in _blas)


def _blas_name() -> str:
    """The BLAS NumPy was built with, lower case ("scipy-openblas", "accelerate", "mkl"); "" when unknown."""
    import numpy as np

    try:
        return str(np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]).lower()
    except Exception:  # an older or unusual build: no claim
        return ""


def in_halves(work: Callable[[int, int], object], n_rows: int, nbytes: int) -> None:
    """work(r0, r1) over the rows 0..n_rows: the second half on a helper thread while this one does the first,
    when two threads are on and the work is large enough; else work(0, n_rows) here. The helper runs in a copy
    of this thread's context (NumPy's errstate is a context variable). Each row is computed once, by one
    thread; the caller writes disjoint rows, so the result does not depend on the split.

    A split inside a split (bf16 widening inside a band of GGUF rows) runs whole on whichever thread meets it:
    the helper is one thread, so on the helper it would wait for itself, and on this thread it would queue
    behind the helper's own half and run the two halves one after the other."""
    if n_rows < 2 or nbytes < MIN_SPLIT_BYTES or not two_threads() or getattr(_inside, "active", False):
        work(0, n_rows)
        return
    half = n_rows // 2
    later = _helper().submit(contextvars.copy_context().run, _inside_split, work, half, n_rows)
    try:
        _inside_split(work, 0, half)
    finally:
        later.result()


def _inside_split(work: Callable[[int, int], object], r0: int, r1: int) -> None:
    _inside.active = True
    try:
        work(r0, r1)
    finally:
        _inside.active = False


def _helper():
    """The helper thread's pool, made again in a forked child (the parent's thread does not exist there)."""
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        from concurrent.futures import ThreadPoolExecutor

        _pool, _pool_pid = ThreadPoolExecutor(1, thread_name_prefix=_HELPER), os.getpid()
    return _pool
