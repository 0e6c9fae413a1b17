"""Every fixture of every family and route, run with the second core on for every size (so even these tiny
tensors are split, and each thread's rows cut into pieces of a row or two), records the same tensors, bit for
bit, as one thread; the statistics agree within float64 merge rounding (1e-12 relative). The parity tests
against transformers then hold for both."""

from __future__ import annotations

import numpy as np
import pytest

import tracer
from conftest import ENCODERS, FAMILIES, SEQ2SEQ, VARIANTS, model_dir
from tracer import threads
from tracer.engine import ops

ALL = FAMILIES + VARIANTS + ENCODERS + SEQ2SEQ


def _run(model):
    kwargs = {"ids": [[0, 5, 9, 17, 3, 11, 2], [0, 7, 2]]}  # two rows, one padded: masked cells in every block
    if model.spec.route_text.startswith("encoder-decoder"):
        kwargs["decoder_ids"] = [[0, 4, 6], [0, 4, 6]]
    with np.errstate(all="ignore"):
        return model.run(**kwargs)


@pytest.mark.parametrize("name", ALL)
def test_two_threads_record_the_same_tensors_as_one(name, monkeypatch):
    model = tracer.load_model(model_dir(name))
    monkeypatch.setattr(threads, "_parked", False)
    one = _run(model)
    monkeypatch.setattr(threads, "_parked", True)
    monkeypatch.setattr(threads, "_blas", "scipy-openblas")
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(threads, "MIN_SPLIT_BYTES", 0)
    monkeypatch.setattr(ops, "_PIECE_BYTES", 64)  # pieces of a row or two
    assert threads.two_threads()
    both = _run(model)
    assert one.names == both.names
    for a, b in zip(one.steps, both.steps):
        if a.array is not None:
            x, y = np.asarray(a.array), np.asarray(b.array)
            assert x.dtype == y.dtype and x.shape == y.shape, a.name
            if x.dtype.kind == "f":
                nan = np.isnan(x)
                np.testing.assert_array_equal(nan, np.isnan(y), err_msg=a.name)
                np.testing.assert_array_equal(x[~nan], y[~nan], err_msg=a.name)  # -0.0 == 0.0: the mask's +0
            else:
                np.testing.assert_array_equal(x, y, err_msg=a.name)
        for k in ("min", "max", "absmax", "nan", "inf"):
            assert a.stats[k] == b.stats[k], (a.name, k)
        for k in ("mean", "std"):
            assert b.stats[k] == pytest.approx(a.stats[k], rel=1e-12, abs=1e-30), (a.name, k)
