"""No float64 in a float32 run: every fixture of every family and route, run in float32, records every step in
float32 (or an integer / bool dtype for ids, positions and masks). A NumPy 2 promotion (`x / np.sqrt(d)` with
d a NumPy float64 scalar) would make the rest of the pass float64: the same numbers, several times slower."""

from __future__ import annotations

import sys
from pathlib import Path

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


ENGINE = str(Path(tracer.__file__).parent / "engine")


class Float64Returns:
    """A profile hook: every NumPy float64 array a function of tracer.engine returns, by function."""

    def __init__(self):
        self.found: dict[str, tuple] = {}

    def __call__(self, frame, event, arg):
        if event == "return" and frame.f_code.co_filename.startswith(ENGINE) and isinstance(arg, np.ndarray):
            # generate's per-step probabilities [batch, vocab] are widened on purpose, after the pass
            if arg.dtype == np.float64 and not _called_from(frame, "_choose_all"):
                self.found.setdefault(f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}", arg.shape)


def _called_from(frame, name: str) -> bool:
    while frame is not None:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


def _inputs(model) -> dict:
    kwargs = {"ids": [[0, 5, 9, 17, 3], [0, 7, 2]]}
    if model.spec.route_text.startswith("encoder-decoder"):
        kwargs["decoder_ids"] = [[0, 4, 6], [0, 4, 6]]
    return kwargs


@pytest.mark.parametrize("name", ALL)
def test_no_intermediate_product_is_float64(name, monkeypatch):
    """Not only the recorded steps: no function of the engine returns a float64 array in a float32 run (the
    whole pass, the pass in blocks of rows with statistics only, and decoding with a cache)."""
    from tracer.engine import row_blocks
    from tracer.engine import forward as forward_module

    model = tracer.load_model(model_dir(name))
    hook = Float64Returns()
    monkeypatch.setattr(row_blocks, "BLOCK_BYTES", 64)  # the blocked paths too, on tiny fixtures
    monkeypatch.setattr(forward_module, "HEAD_BLOCK_BYTES", 64)
    sys.setprofile(hook)
    try:
        model.run(**_inputs(model))
        model.run(**_inputs(model), keep=())
        if model.spec.head == "lm" and model.route != "encoder-decoder":
            model.generate(ids=[[0, 5, 9]], max_new_tokens=3, ignore_eos=True)
    finally:
        sys.setprofile(None)
    assert not hook.found, f"{name}: float64 returned by {hook.found}"
