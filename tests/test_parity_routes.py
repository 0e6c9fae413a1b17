"""Encoder and encoder-decoder families against transformers' eager forward, step by step, on the committed
fixtures (built by fixtures/build_fixtures.py; tests/test_parity_live.py rebuilds them with transformers).

Tolerance rule: a step matches when max |tracer - transformers| <= ATOL * max(1, max |transformers|) over real
(unpadded) query positions: absolute for values up to 1, relative to the step's largest magnitude beyond
(T5 v1.1's unscaled logits reach ~20, where float32 rounding alone is ~2e-6). ATOL is 1e-5 in float32 and
1e-10 in float64. Padded query rows are left out: transformers fills masked scores with the dtype minimum,
so its fully masked rows differ from tracer's zeros by design.
"""

import numpy as np
import pytest

import conftest
from conftest import model_dir
from route_parity import ATOL32, ATOL64, compare, must_compare, run_like
from tracer import load_model
from tracer.trace import Trace

ENCODERS = tuple(getattr(conftest, "ENCODERS", ()))
SEQ2SEQ = tuple(getattr(conftest, "SEQ2SEQ", ()))
ROUTES = ENCODERS + SEQ2SEQ

pytestmark = pytest.mark.skipif(not ROUTES, reason="no encoder fixtures in tests/conftest.py")


@pytest.mark.parametrize("name", ROUTES)
def test_float32_matches_transformers(name):
    folder = model_dir(name)
    model = load_model(folder)
    ref = Trace.load(folder / "reference.safetensors")
    ours = run_like(model, ref)
    np.testing.assert_array_equal(ours["input.ids"], ref["input.ids"])
    errors = compare(ref, ours, ATOL32)
    missing = [n for n in must_compare(model) if n not in errors]
    assert not missing, f"the reference lacks {missing}"
    assert ours["embed.out" if model.route == "encoder" else "encoder.embed.out"].dtype == np.float32


@pytest.mark.parametrize("name", ROUTES)
def test_float64_matches_transformers_float64(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference64.safetensors")
    model = load_model(folder, dtype="float64")
    errors = compare(ref, run_like(model, ref), ATOL64)
    assert ("logits" in errors) or ("pooled" in errors)


@pytest.mark.parametrize("name", ROUTES)
def test_right_padded_batch_matches_transformers(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference_batch.safetensors")
    assert (ref["input.mask"] == 0).any(), "the batch reference should contain padding"
    compare(ref, run_like(load_model(folder), ref), ATOL32)


@pytest.mark.parametrize("name", ENCODERS)
def test_left_padded_batch_matches_transformers(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference_batch_left.safetensors")
    assert (ref["input.mask"][:, 0] == 0).any(), "the left batch reference should start with padding"
    compare(ref, run_like(load_model(folder), ref), ATOL32)
