"""tracer against transformers' eager forward, tensor by tensor, on the committed fixtures.

The references were recorded by fixtures/build_fixtures.py (transformers eager,
float32 and float64); tests/test_parity_live.py regenerates them when torch is
installed. Tolerances: max-abs 1e-5 in float32, 1e-10 in float64, times the step's scale max(1, max|ref|).
"""

import numpy as np
import pytest

from conftest import FAMILIES, FAMILY_VARIANTS, OPT_VARIANTS, ROPE_VARIANTS, VARIANTS, model_dir
from parity_check import ATOL32, ATOL64, check_coverage, compare, run_like
from tracer import load_model
from tracer.trace import Trace


@pytest.mark.parametrize("name", FAMILIES + VARIANTS)
def test_float32_matches_transformers(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference.safetensors")
    model = load_model(folder)
    ours = run_like(model, ref)
    np.testing.assert_array_equal(ours["input.ids"], ref["input.ids"])
    errors = compare(ref, ours, ATOL32)
    check_coverage(errors, model.spec.n_layers, model.spec.final_norm)
    assert ours["logits"].dtype == np.float32 and ours["blocks.0.attn.weights"].dtype == np.float32


@pytest.mark.parametrize("name", FAMILIES)
def test_float64_matches_transformers_float64(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference64.safetensors")
    ours = run_like(load_model(folder, dtype="float64"), ref)
    assert ours["logits"].dtype == np.float64
    errors = compare(ref, ours, ATOL64)
    assert "logits" in errors


@pytest.mark.parametrize("name", FAMILIES)
def test_padded_batch_matches_transformers(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference_batch.safetensors")
    assert (ref["input.mask"] == 0).any(), "the batch reference should contain padding"
    compare(ref, run_like(load_model(folder), ref), ATOL32)


# ---------- issue 10: rope scaling, OPT projections and post-norm ----------


@pytest.mark.parametrize("name", ROPE_VARIANTS + OPT_VARIANTS + FAMILY_VARIANTS)
def test_variant_float64_matches_transformers_float64(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference64.safetensors")
    compare(ref, run_like(load_model(folder, dtype="float64"), ref), ATOL64)


@pytest.mark.parametrize("name", ROPE_VARIANTS + OPT_VARIANTS + FAMILY_VARIANTS)
def test_variant_padded_batch_matches_transformers(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference_batch.safetensors")
    compare(ref, run_like(load_model(folder), ref), ATOL32)


@pytest.mark.parametrize("name", ["llama-dynamic", "llama-longrope"])
def test_length_dependent_rope_on_both_sides_of_its_switch(name):
    """The reference runs 15 positions, past the switch (8); reference_short runs 6, under it. Both hold,
    and the first 6 positions' rotated queries differ between them: the switch really happened."""
    folder = model_dir(name)
    long_ref, short_ref = (Trace.load(folder / f) for f in ("reference.safetensors", "reference_short.safetensors"))
    switch = load_model(folder).spec.rope
    assert long_ref["input.ids"].shape[1] > 8 >= short_ref["input.ids"].shape[1]
    assert (switch.max_positions or switch.original_max_positions) == 8
    model = load_model(folder)
    short = run_like(model, short_ref)
    compare(short_ref, short, ATOL32)
    longer = run_like(model, long_ref)
    n = short_ref["input.ids"].shape[1]
    assert np.abs(longer["blocks.0.attn.q_rot"][:, :, :n] - short["blocks.0.attn.q_rot"]).max() > 1e-3
