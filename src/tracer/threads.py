"""The second core for the elementwise steps and the statistics, when OpenBLAS's own threads let it go.

NumPy releases the GIL in ufuncs and reductions on large arrays, so the rows of one tensor can be split over
two threads: each half is the same operations on the same numbers, so the same bits. That wins only if the
second core is free. After every matrix product OpenBLAS's worker threads spin for 2^28 CPU cycles (about
0.1 s) before they sleep, on the very core the second thread needs: with that default, splitting gains
nothing (measured, issue 20). OPENBLAS_THREAD_TIMEOUT shortens the spin to 2^N cycles, but OpenBLAS reads it
once, when NumPy first loads it. So `import tracer` sets it (unless the user did) when NumPy is not loaded
yet: the `tracer` command always, a program that imports tracer before NumPy too (or sets the variable
itself). Otherwise the elementwise steps stay on one thread, as before; `two_threads()` says which.

Measured (GPT-2 small, 512 tokens, 7 rounds alternating in one process, AVX2 host): with the spin shortened,
two threads against one: bare forward 1.09 s against 1.18 s, statistics only 1.24 s against 1.49 s; with
OpenBLAS's default spin two threads lose (1.30 s against 1.22 s, 1.55 s against 1.48 s). The shorter spin
alone changes neither the products nor decoding beyond this host's noise.
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

_parked: bool | None = None  # whether OpenBLAS's threads sleep soon after a product (set by park_blas_threads)
_blas: str | None = None  # NumPy's BLAS, read at the first two_threads()
_pool = None
_pool_pid = 0  # the process that made _pool
_on_helper = threading.local()  # .active on the helper thread: a split inside a split runs whole there


def park_blas_threads() -> bool:
    """Before NumPy loads: ask OpenBLAS to put its threads to sleep soon after each product (a value the user
    set is kept). Returns whether its threads do sleep soon; once NumPy is loaded that can only be read."""
    global _parked
    if _parked is None:
        if "numpy" not in sys.modules:
            os.environ.setdefault(SPIN_VAR, str(SPIN_LOG2_CYCLES))
        try:
            _parked = int(os.environ.get(SPIN_VAR, "")) <= MOST_SPIN
        except ValueError:
            _parked = False
    return _parked


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
    thread; the caller writes disjoint rows, so the result does not depend on the split."""
    if n_rows < 2 or nbytes < MIN_SPLIT_BYTES or not two_threads() or getattr(_on_helper, "active", False):
        work(0, n_rows)
        return
    half = n_rows // 2
    later = _helper().submit(contextvars.copy_context().run, _as_helper, work, half, n_rows)
    try:
        work(0, half)
    finally:
        later.result()


def _as_helper(work: Callable[[int, int], object], r0: int, r1: int) -> None:
    _on_helper.active = True
    try:
        work(r0, r1)
    finally:
        _on_helper.active = False


def _helper():
    """The helper thread's pool, made again in a forked child (the parent's thread does not exist there)."""
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        from concurrent.futures import ThreadPoolExecutor

        _pool, _pool_pid = ThreadPoolExecutor(1, thread_name_prefix="tracer-rows"), os.getpid()
    return _pool
