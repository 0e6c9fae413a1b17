"""Hypothesis strategies for hostile input, and the contract each property asserts."""

from __future__ import annotations

import time
import tracemalloc
from contextlib import contextmanager

from hypothesis import strategies as st

from tracer.errors import TracerError

MEMORY_LIMIT = 256 * 1024 * 1024  # bytes traced by tracemalloc (NumPy arrays included)
TIME_LIMIT = 10.0  # seconds per example

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from([0, 1, -1, 2, 32, 10**9, 10**30, 0.5, -0.5, 1e400, "32", "", "abc", "NaN"]),
)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=12)


@contextmanager
def bounded():
    """Time and traced memory of one example stay bounded."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        yield
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    elapsed = time.monotonic() - start
    assert elapsed < TIME_LIMIT, f"took {elapsed:.1f} s"
    assert peak < MEMORY_LIMIT, f"peaked at {peak / 2**20:.0f} MiB"


def only_tracer_errors(fn, *args, **kwargs):
    """Call fn: it may succeed or raise TracerError, nothing else (TracerError gives one line)."""
    try:
        return fn(*args, **kwargs)
    except TracerError as exc:
        assert "\n" not in exc.message, exc.message
        return None


def assert_cli_contract(result, allowed=(0, 1, 2)):
    text = result.output
    assert result.exit_code in allowed, text
    assert "Traceback" not in text and "internal error" not in text, text
    if result.exit_code == 2:
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("error: ")]
        assert len(errors) == 1, text
