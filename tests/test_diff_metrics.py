"""The diff's measures against values worked out by hand."""

import math

import numpy as np
import pytest

from tracer.diff import metrics as M


def test_abs_and_rel_errors():
    ref = np.array([1.0, -2.0, 4.0], dtype=np.float32)
    mine = np.array([1.5, -2.0, 3.0], dtype=np.float32)
    assert M.max_abs(ref, mine) == pytest.approx(1.0)
    assert M.mean_abs(ref, mine) == pytest.approx(0.5)  # (0.5 + 0 + 1) / 3
    assert M.max_rel(ref, mine) == pytest.approx(0.5)  # 0.5 / 1 beats 1 / 4


def test_max_rel_ignores_cells_where_the_reference_is_essentially_zero():
    ref = np.array([1.0, 1e-9])
    mine = np.array([1.0, 1e-3])  # a huge relative error on a value that is zero for all purposes
    assert M.max_rel(ref, mine) == 0.0


def test_cosine_of_orthogonal_parallel_and_opposite():
    a = np.array([1.0, 0.0])
    assert M.cosine(a, np.array([0.0, 3.0])) == pytest.approx(0.0)
    assert M.cosine(a, np.array([2.0, 0.0])) == pytest.approx(1.0)
    assert M.cosine(a, -a) == pytest.approx(-1.0)
    assert M.cosine(np.zeros(3), np.zeros(3)) == 1.0


def test_nmse_db_of_a_ten_percent_error_is_minus_twenty():
    ref = np.array([3.0, 4.0])  # energy 25
    mine = ref * 1.1  # error energy 0.25
    assert M.nmse(ref, mine) == pytest.approx(0.01)
    assert M.nmse_db(ref, mine) == pytest.approx(-20.0)
    assert M.nmse_db(ref, ref) == -math.inf


def test_tolerance_excess_is_allclose():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal(200)
    mine = ref + rng.standard_normal(200) * 1e-3
    excess = M.tolerance_excess(ref, mine, 1e-4, 1e-3)
    assert (excess <= 1).all() == np.allclose(mine, ref, rtol=1e-3, atol=1e-4)
    assert ((excess <= 1) == np.isclose(mine, ref, rtol=1e-3, atol=1e-4)).all()


def test_zero_tolerance_passes_only_exact_cells():
    excess = M.tolerance_excess(np.array([1.0, 2.0]), np.array([1.0, 2.0000001]), 0.0, 0.0)
    assert excess[0] == 0.0 and excess[1] == math.inf


def test_nonfinite_pattern_equal_infinities_are_equal():
    a = np.array([-np.inf, 1.0, np.nan, np.inf])
    assert not M.nonfinite_mismatch(a, a.copy()).any()
    b = np.array([-np.inf, np.nan, np.nan, -np.inf])
    assert M.nonfinite_mismatch(a, b).tolist() == [False, True, False, True]


def test_kl_divergence_matches_the_definition_both_ways():
    p = np.array([0.5, 0.25, 0.25])
    q = np.array([0.25, 0.25, 0.5])
    lp, lq = M.log_softmax(np.log(p)), M.log_softmax(np.log(q))
    expected_pq = 0.5 * math.log(2) + 0.25 * math.log(0.5)
    expected_qp = 0.25 * math.log(0.5) + 0.5 * math.log(2)
    assert M.kl_divergence(lp, lq) == pytest.approx(expected_pq)
    assert M.kl_divergence(lq, lp) == pytest.approx(expected_qp)
    assert M.kl_divergence(lp, lp) == pytest.approx(0.0, abs=1e-15)


def test_kl_from_probabilities_with_zeros():
    p = np.array([[1.0, 0.0]])
    q = np.array([[0.5, 0.5]])
    kl = M.kl_divergence(M.log_probs_from_probs(p), M.log_probs_from_probs(q))
    assert kl[0] == pytest.approx(math.log(2))


def test_top1_and_topk_overlap_per_position():
    ref = np.array([[5.0, 4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0, 5.0]])
    mine = np.array([[4.0, 5.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0, 5.0]])
    assert M.top1_agreement(ref, mine).tolist() == [False, True]
    assert M.topk_overlap(ref, mine, 2).tolist() == [1.0, 1.0]  # same two tokens on top, order aside
    swapped = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])
    assert M.topk_overlap(ref[:1], swapped, 2).tolist() == [0.0]
    assert M.topk_overlap(ref[:1], swapped, 3).tolist() == [pytest.approx(1 / 3)]


def test_chunked_summary_agrees_with_the_single_pass_measures():
    rng = np.random.default_rng(7)
    ref = rng.standard_normal(1000).astype(np.float32)
    mine = (ref + rng.standard_normal(1000) * 1e-3).astype(np.float32)
    ref[10], mine[10] = -np.inf, -np.inf  # shared: ignored by the measures
    s = M.error_summary(ref, mine, 1e-4, 1e-3, chunk=64)
    finite = np.isfinite(ref)
    r, m = ref[finite], mine[finite]
    assert s["compared"] == 999 and s["nonfinite_mismatch"] == 0
    assert s["max_abs"] == pytest.approx(M.max_abs(r, m))
    assert s["mean_abs"] == pytest.approx(M.mean_abs(r, m))
    assert s["max_rel"] == pytest.approx(M.max_rel(r, m))
    assert s["cosine"] == pytest.approx(M.cosine(r, m))
    assert s["nmse"] == pytest.approx(M.nmse(r, m))
    excess = M.tolerance_excess(ref[finite], mine[finite], 1e-4, 1e-3)
    assert s["outside"] == int((excess > 1).sum())
    assert s["worst"] == np.flatnonzero(finite)[int(np.argmax(excess))]


def test_chunked_summary_finds_the_first_nonfinite_difference():
    ref = np.zeros(300, dtype=np.float32)
    mine = ref.copy()
    mine[[150, 250]] = np.nan
    s = M.error_summary(ref, mine, 1e-4, 1e-3, chunk=100)
    assert s["nonfinite_mismatch"] == 2 and s["first_nonfinite"] == 150
