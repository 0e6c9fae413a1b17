"""The fused, chunked statistics (trace/stats.py) against a plain float64 computation of each statistic.

Tolerance: min, max, absmax and the NaN/Inf counts exact; mean and std within 1e-6 relative to the scale
max(|mean|, std, tiny) (float32 chunk sums merged in float64: seen 1e-7 on a GPT-2 forward's 201 steps).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracer.trace import stats as S
from tracer.trace.stats import tensor_stats


def reference(a: np.ndarray) -> dict:
    x = np.asarray(a, dtype=np.float64).ravel()
    finite = x[np.isfinite(x)]
    out = {"nan": int(np.isnan(x).sum()), "inf": int(np.isinf(x).sum())}
    if finite.size == 0:
        return {**out, "mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0, "absmax": 0.0}
    return {**out, "mean": float(finite.mean()), "std": float(finite.std()), "min": float(finite.min()),
            "max": float(finite.max()), "absmax": float(np.abs(finite).max())}


def assert_close(got: dict, want: dict):
    for k in ("min", "max", "absmax", "nan", "inf"):
        assert got[k] == want[k], (k, got[k], want[k])
    scale = max(abs(want["mean"]), want["std"], 1e-30)
    for k in ("mean", "std"):
        assert abs(got[k] - want[k]) <= 1e-6 * scale, (k, got[k], want[k])


rng = np.random.default_rng(3)
SIZES = (1, 7, S._CHUNK - 1, S._CHUNK, S._CHUNK + 5, 3 * S._CHUNK + 11)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "int32"])
def test_random_tensors_of_every_size_and_dtype(n, dtype):
    x = (rng.standard_normal(n) * 3 + 1.5)
    a = x.astype(dtype) if dtype.startswith("float") else (x * 100).astype(dtype)
    assert_close(tensor_stats(a), reference(a))


def test_bfloat16_is_widened_exactly():
    ml = pytest.importorskip("ml_dtypes")
    a = rng.standard_normal(S._CHUNK + 3).astype(ml.bfloat16)
    assert_close(tensor_stats(a), reference(a.astype(np.float32)))


@pytest.mark.parametrize("n", (5, S._CHUNK + 9))
def test_nan_and_inf_are_counted_and_left_out(n):
    a = rng.standard_normal(n).astype(np.float32)
    a[::7] = -np.inf
    a[3] = np.nan
    a[-1] = np.inf
    got = tensor_stats(a)
    assert_close(got, reference(a))
    assert got["nan"] == 1 and got["inf"] == len(range(0, n, 7)) + 1 - (1 if (n - 1) % 7 == 0 else 0)


def test_all_non_finite_and_empty_and_bool():
    assert tensor_stats(np.full(10, -np.inf, np.float32)) == {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0,
                                                               "absmax": 0.0, "nan": 0, "inf": 10}
    assert tensor_stats(np.zeros((0, 3), np.float32))["mean"] == 0.0
    b = rng.random(S._CHUNK + 1) < 0.3
    assert_close(tensor_stats(b), reference(b.astype(np.float64)))


def test_large_values_do_not_overflow_the_float32_sums():
    a = np.full(S._CHUNK + 1, 3e38, np.float32)
    a[::2] = -3e38
    got, want = tensor_stats(a), reference(a)
    assert math.isfinite(got["mean"]) and math.isfinite(got["std"])
    assert_close(got, want)


def test_a_constant_tensor_has_zero_std():
    a = np.full(S._CHUNK * 2 + 1, 0.1, np.float32)
    assert_close(tensor_stats(a), reference(a))  # std within 1e-6 of the mean: float32 chunk sums (1.5e-8 seen)


def test_a_transposed_view_is_read_in_memory_order_with_the_same_statistics():
    """The heads of q, k, v are a transposed view; its statistics are taken in memory order (no copy): the same
    values, so the same statistics up to the merge order of the chunks."""
    x = (rng.standard_normal((1, 3 * S._CHUNK // 64 + 5, 64)) * 2 + 0.5).astype(np.float32)
    x[0, 7, 3] = np.inf
    heads = x.reshape(1, -1, 4, 16).transpose(0, 2, 1, 3)  # [batch, heads, pos, d_head], not C-contiguous
    assert not heads.flags.c_contiguous
    assert_close(tensor_stats(heads), reference(heads))
    assert_close(tensor_stats(heads), tensor_stats(np.ascontiguousarray(heads)))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.data())
def test_a_strided_view_is_read_as_rows_without_a_copy(shape, data):
    """A run of columns cut from a wider array (attention scores' keys) is read as [rows, width] in place; any
    other view (transposed, reversed, stepped, broadcast) as its values in memory order. Either way: the same
    values, and the same statistics as a contiguous copy (min, max and counts exactly)."""
    base = np.asarray(data.draw(st.lists(st.floats(-1e3, 1e3, width=32) | st.sampled_from([np.inf, -np.inf, np.nan]),
                                         min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                      np.float32).reshape(shape)
    c0 = data.draw(st.integers(0, shape[-1] - 1))
    c1 = data.draw(st.integers(c0 + 1, shape[-1]))
    view = base[..., c0:c1]
    kind = data.draw(st.sampled_from(["columns", "transposed", "reversed", "stepped", "broadcast"]))
    if kind == "transposed":
        view = view.T
    elif kind == "reversed":
        view = view[::-1]
    elif kind == "stepped":
        view = view[..., ::2]
    elif kind == "broadcast":
        view = np.broadcast_to(view, (2, *view.shape))
    rows = S.memory_rows(view)
    assert np.array_equal(np.sort(rows, axis=None), np.sort(view, axis=None), equal_nan=True)
    if kind == "columns":
        assert np.shares_memory(rows, base)  # read in place
    want = tensor_stats(np.ascontiguousarray(view))
    got = tensor_stats(view)
    for k in ("min", "max", "absmax", "nan", "inf"):
        assert got[k] == want[k], k
    scale = max(abs(want["mean"]), want["std"], 1e-30)
    assert abs(got["mean"] - want["mean"]) <= 1e-6 * scale and abs(got["std"] - want["std"]) <= 1e-6 * scale


def test_large_runs_of_columns_are_read_in_chunks_of_rows():
    """Scores' keys 0:a of a [heads, rows, keys] block: more than one chunk of rows, a NaN and -inf among them."""
    x = (rng.standard_normal((12, 85, 2048)) * 2 + 0.25).astype(np.float32)
    x[3, 4, 5], x[11, 84, 1000] = np.nan, -np.inf
    view = x[..., :1001]
    assert S.memory_rows(view).shape == (12 * 85, 1001) and np.shares_memory(S.memory_rows(view), x)
    assert_close(tensor_stats(view), reference(view))
