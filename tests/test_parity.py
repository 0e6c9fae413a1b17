"""tracer against transformers' eager forward, tensor by tensor, on the committed fixtures.

The references were recorded by fixtures/build_fixtures.py (transformers eager,
float32 and float64); tests/test_parity_live.py regenerates them when torch is
installed. Tolerances: max-abs 1e-5 in float32, 1e-10 in float64.
"""

import numpy as np
import pytest

from conftest import FAMILIES, FAMILY_VARIANTS, OPT_VARIANTS, ROPE_VARIANTS, VARIANTS, model_dir
from tracer import load_model
from tracer.steps import describe
from tracer.trace import Trace

ATOL32 = 1e-5
ATOL64 = 1e-10
MUST_COMPARE = ("embed.out", "blocks.{i}.resid_post", "final_norm.out", "blocks.{i}.attn.weights", "logits",
                "blocks.{i}.attn.q", "blocks.{i}.attn.k", "blocks.{i}.attn.v", "blocks.{i}.mlp.out")


def _real_rows(name: str, arr: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Only real (unpadded) positions: HF fills masked scores with finfo.min, so pad rows differ by design."""
    axes = describe(name).axes
    if "q_len" in axes:
        rows = mask.astype(bool)[:, None, :, None]  # [batch, 1, q, 1]
        return np.where(rows, arr, 0)
    if axes[:2] == ("batch", "pos"):
        return np.where(mask.astype(bool).reshape(mask.shape + (1,) * (arr.ndim - 2)), arr, 0)
    if axes[2:3] == ("pos",):  # q/k/v [batch, heads, pos, d_head]
        return np.where(mask.astype(bool)[:, None, :, None], arr, 0)
    return arr


def compare(ref: Trace, ours: Trace, atol: float) -> dict[str, float]:
    mask = ref["input.mask"] if "input.mask" in ref else np.ones_like(ref["input.ids"])
    errors = {}
    for step in ref.steps:
        if step.array is None or step.name.startswith("input.") or step.name not in ours:
            continue
        a, b = ours[step.name], step.array
        assert a.shape == b.shape, f"{step.name}: {a.shape} vs {b.shape}"
        diff = np.abs(_real_rows(step.name, a.astype(np.float64), mask) - _real_rows(step.name, b.astype(np.float64), mask))
        errors[step.name] = float(diff.max())
    bad = {k: v for k, v in errors.items() if not v <= atol}
    assert not bad, f"steps beyond {atol}: {bad}"
    return errors


def _check_coverage(errors: dict, n_layers: int, final_norm: bool = True) -> None:
    for template in MUST_COMPARE:
        if template == "final_norm.out" and not final_norm:  # post-norm without a final norm (opt-350m)
            continue
        names = [template.format(i=i) for i in range(n_layers)] if "{i}" in template else [template]
        missing = [n for n in names if n not in errors]
        assert not missing, f"reference lacks {missing}"


def _run_like(model, ref: Trace):
    ids, mask = ref["input.ids"], ref["input.mask"] if "input.mask" in ref else np.ones_like(ref["input.ids"])
    rows = [[int(t) for t, m in zip(r, mr) if m] for r, mr in zip(ids, mask)]
    left = bool(mask[:, 0].min() == 0)
    return model.run(ids=rows, pad_side="left" if left else "right")


@pytest.mark.parametrize("name", FAMILIES + VARIANTS)
def test_float32_matches_transformers(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference.safetensors")
    model = load_model(folder)
    ours = _run_like(model, ref)
    np.testing.assert_array_equal(ours["input.ids"], ref["input.ids"])
    errors = compare(ref, ours, ATOL32)
    _check_coverage(errors, model.spec.n_layers, model.spec.final_norm)
    assert ours["logits"].dtype == np.float32 and ours["blocks.0.attn.weights"].dtype == np.float32


@pytest.mark.parametrize("name", FAMILIES)
def test_float64_matches_transformers_float64(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference64.safetensors")
    ours = _run_like(load_model(folder, dtype="float64"), ref)
    assert ours["logits"].dtype == np.float64
    errors = compare(ref, ours, ATOL64)
    assert "logits" in errors


@pytest.mark.parametrize("name", FAMILIES)
def test_padded_batch_matches_transformers(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference_batch.safetensors")
    assert (ref["input.mask"] == 0).any(), "the batch reference should contain padding"
    compare(ref, _run_like(load_model(folder), ref), ATOL32)


# ---------- issue 10: rope scaling, OPT projections and post-norm ----------


@pytest.mark.parametrize("name", ROPE_VARIANTS + OPT_VARIANTS + FAMILY_VARIANTS)
def test_variant_float64_matches_transformers_float64(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference64.safetensors")
    compare(ref, _run_like(load_model(folder, dtype="float64"), ref), ATOL64)


@pytest.mark.parametrize("name", ROPE_VARIANTS + OPT_VARIANTS + FAMILY_VARIANTS)
def test_variant_padded_batch_matches_transformers(name):
    folder = model_dir(name)
    ref = Trace.load(folder / "reference_batch.safetensors")
    compare(ref, _run_like(load_model(folder), ref), ATOL32)


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
    short = _run_like(model, short_ref)
    compare(short_ref, short, ATOL32)
    longer = _run_like(model, long_ref)
    n = short_ref["input.ids"].shape[1]
    assert np.abs(longer["blocks.0.attn.q_rot"][:, :, :n] - short["blocks.0.attn.q_rot"]).max() > 1e-3
