import numpy as np
import pytest

from tracer.trace import tensor_stats


@pytest.mark.parametrize("n", [10, 100_000])
def test_stats_match_numpy(n):
    x = (np.random.default_rng(0).standard_normal(n) * 3 + 1).astype(np.float32)
    s = tensor_stats(x)
    assert s["mean"] == pytest.approx(float(x.astype(np.float64).mean()), rel=1e-5)
    assert s["std"] == pytest.approx(float(x.astype(np.float64).std()), rel=1e-4)
    assert (s["min"], s["max"]) == (float(x.min()), float(x.max()))
    assert s["absmax"] == max(abs(float(x.min())), abs(float(x.max())))
    assert (s["nan"], s["inf"]) == (0, 0)


def test_non_finite_values_are_counted_and_excluded():
    x = np.array([1.0, 2.0, np.nan, -np.inf, np.inf, 3.0], dtype=np.float32)
    s = tensor_stats(x)
    assert (s["nan"], s["inf"]) == (1, 2)
    assert (s["min"], s["max"], s["mean"]) == (1.0, 3.0, 2.0)


def test_integer_and_empty_arrays():
    assert tensor_stats(np.array([1, 2, 3], dtype=np.int64))["mean"] == 2.0
    assert tensor_stats(np.zeros((0, 3), np.float32))["max"] == 0.0


def test_huge_finite_values_do_not_overflow_to_inf():
    x = np.full(10_000, 3e38, dtype=np.float32)
    s = tensor_stats(x)
    assert (s["nan"], s["inf"]) == (0, 0)
    assert s["mean"] == pytest.approx(3e38, rel=1e-6)
    assert s["std"] == pytest.approx(0.0, abs=1e32)
