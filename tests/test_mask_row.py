"""The attention row worked by hand: stable softmax, masking before vs after."""

from __future__ import annotations

import math

import pytest

from tracer.errors import TracerError
from tracer.masks.row import causal_keep_row, softmax_by_hand, work_row


def test_stable_softmax_by_hand_matches_the_definition():
    row = softmax_by_hand([1.2, 2.0, 0.4])
    assert row.max == 2.0
    assert row.shifted == pytest.approx([-0.8, 0.0, -1.6])
    assert row.exps == pytest.approx([math.exp(-0.8), 1.0, math.exp(-1.6)])
    total = math.exp(1.2) + math.exp(2.0) + math.exp(0.4)
    assert row.weights == pytest.approx([math.exp(1.2) / total, math.exp(2.0) / total, math.exp(0.4) / total])


def test_huge_scores_do_not_overflow():
    row = softmax_by_hand([1000.0, 1001.0])
    assert sum(row.weights) == pytest.approx(1.0)
    assert row.weights[1] == pytest.approx(1 / (1 + math.exp(-1)))


def test_masked_row_right_and_wrong_way():
    worked = work_row([1.2, 2.0, 0.4], tokens=["猫", "追", "球"], query=1)
    assert worked.keep == [True, True, False]
    assert sum(worked.masked.weights) == pytest.approx(1.0)
    assert worked.masked.weights[2] == 0.0  # exactly zero, removed before the softmax
    assert worked.masked.weights[0] == pytest.approx(math.exp(1.2) / (math.exp(1.2) + math.exp(2.0)))
    assert worked.wrong_sum < 1.0
    assert worked.wrong_sum == pytest.approx(1 - worked.unmasked.weights[2])


def test_explicit_keep_flags_and_json():
    worked = work_row([0.0, 1.0, 2.0, 3.0], keep=[True, False, True, False])
    data = worked.to_json()
    assert data["mode"] == "row"
    assert data["masked"]["weights"][1] == 0.0 and data["masked"]["weights"][3] == 0.0
    assert data["masked"]["weights_sum"] == pytest.approx(1.0)
    assert data["wrong_way"]["sum"] < 1.0
    assert data["masked"]["shifted"][1] is None


def test_causal_row_and_errors():
    assert causal_keep_row(4, 0).tolist() == [True, False, False, False]
    with pytest.raises(TracerError):
        causal_keep_row(3, 3)
    with pytest.raises(TracerError, match="labels"):
        work_row([1.0, 2.0], tokens=["a"])
    with pytest.raises(TracerError, match="every key is blocked"):
        work_row([1.0, 2.0], keep=[False, False])
