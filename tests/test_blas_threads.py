"""The suite runs NumPy's BLAS on a pinned number of threads (tests/conftest.py, TRACER_TEST_BLAS_THREADS,
default 2): what threadpoolctl reads from the loaded library itself, not only what the environment asks."""

from __future__ import annotations

import os

import numpy as np
import pytest


def test_numpy_blas_runs_on_the_pinned_thread_count():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    np.ones((64, 64), np.float32) @ np.ones((64, 64), np.float32)  # the library is loaded and initialised
    blas = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas" and "numpy" in p["filepath"]]
    assert blas, threadpoolctl.threadpool_info()
    assert {p["num_threads"] for p in blas} == {int(os.environ["TRACER_TEST_BLAS_THREADS"])}
