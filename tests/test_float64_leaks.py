"""No float64 in a float32 run: every fixture of every family and route, run in float32, records every step in
float32 (or an integer / bool dtype for ids, positions and masks). A NumPy 2 promotion (`x / np.sqrt(d)` with
d a NumPy float64 scalar) would make the rest of the pass float64: the same numbers, several times slower."""

from __future__ import annotations

import numpy as np
import pytest

import tracer
from conftest import ENCODERS, FAMILIES, SEQ2SEQ, VARIANTS, model_dir

ALL = FAMILIES + VARIANTS + ENCODERS + SEQ2SEQ


@pytest.mark.parametrize("name", ALL)
def test_a_float32_run_has_no_float64_step(name):
    model = tracer.load_model(model_dir(name))
    kwargs = {"ids": [[0, 5, 9, 17, 3], [0, 7, 2]]}
    if model.spec.route_text.startswith("encoder-decoder"):
        kwargs["decoder_ids"] = [[0, 4, 6], [0, 4, 6]]
    trace = model.run(**kwargs)
    floats = {s.name: s.dtype for s in trace.steps if np.dtype(s.dtype).kind == "f"}
    assert floats, "no float step recorded"
    wide = {n: d for n, d in floats.items() if np.dtype(d) != np.float32}
    assert not wide, f"{name}: steps not float32 in a float32 run: {wide}"
