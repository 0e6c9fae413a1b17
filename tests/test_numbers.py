"""One number format for people (screen and page) and one JSON form for programs (tracer.numbers)."""

import json
import math

import numpy as np
from diff_toy import toy_trace

from tracer.diff import diff_traces, report_json
from tracer.html.common import fmt as page_fmt
from tracer.numbers import json_safe, num
from tracer.render.theme import num as screen_num


def test_screen_and_page_write_one_number_alike():
    rng = np.random.default_rng(0)
    values = [0.0185, 123.456, 12345.6, 1e-4, 1.0, -2.5e7, float("nan"), float("-inf")]
    values += list(10.0 ** rng.uniform(-6, 7, 200) * rng.choice([-1, 1], 200))
    for x in values:
        for digits in (2, 3, 4):
            assert page_fmt(x, digits) == screen_num(x, digits), x


def test_num_keeps_the_significant_digits_asked_for():
    # Independent reading: parsing the text back gives the value to `digits` significant digits.
    rng = np.random.default_rng(1)
    for x in 10.0 ** rng.uniform(-3, 5, 300):
        text = num(float(x), 3)
        assert "e" not in text
        expected = round(x) if x >= 1e3 else float(f"{x:.3g}")  # from 1e3 to 1e5 the whole number, never 4.02e+04
        assert math.isclose(float(text), expected, rel_tol=1e-12), (x, text)
    assert num(7) == "7" and num(np.int64(7)) == "7"  # integers stay integers
    assert num(1.0) == "1.0"  # a rounded float does not read as an integer


def test_json_safe_writes_non_finite_as_strings_and_numpy_as_python():
    data = {"a": np.float32("nan"), 3: np.arange(2), "t": (1.5, float("-inf"), float("inf")), "n": None}
    out = json_safe(data)
    assert out == {"a": "nan", "3": [0, 1], "t": [1.5, "-inf", "inf"], "n": None}
    json.dumps(out, allow_nan=False)


def test_diff_json_writes_an_exact_match_as_the_run_json_writes_minus_inf():
    # `tracer run --json` writes -inf as "-inf" (man page, run --json); the diff writes its exact-match dB the same way.
    t = toy_trace([[1, 5, 7]])
    out = report_json(diff_traces(t, toy_trace([[1, 5, 7]])))
    json.dumps(out, allow_nan=False)
    exact = [s for s in out["steps"] if s["metrics"].get("exact") and "nmse_db" in s["metrics"]]
    assert exact and all(s["metrics"]["nmse_db"] == "-inf" for s in exact)


def test_a_diff_error_column_never_hides_a_value():
    # `max rel 0.0` on screen where the JSON said 0.0185: every nonzero value keeps 2 significant digits
    from tracer.render.diff_numbers import error_column

    rng = np.random.default_rng(2)
    columns = [[0.0185, 4500.0, 0.0], [0.5, 3.25], [0.02, 12.0, 999.0]]
    columns += [list(10.0 ** rng.uniform(-8, 5, rng.integers(1, 6))) for _ in range(300)]
    for column in columns:
        f = error_column(column)
        for v in column:
            text = f(v)
            assert (text == "0") if v == 0 else math.isclose(float(text), v, rel_tol=0.05), (column, v, text)
