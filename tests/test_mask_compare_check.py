"""--compare verdicts and --check-weights findings, on cases whose answer is known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from tracer.errors import TracerError
from tracer.masks.check_weights import check_weights, load_weights
from tracer.masks.compare import compare
from tracer.masks.conventions import canonical_mask
from tracer.trace import Step, Trace, tensor_stats

TRIL = "[[1,0,0],[1,1,0],[1,1,1]]"


def test_identical():
    a = canonical_mask("torch-sdpa-bool", TRIL, (1, 2, 3, 3))
    b = canonical_mask("jax-bool", TRIL, (1, 2, 3, 3))
    c = compare(a, canonical_mask("torch-sdpa-bool", None, (1, 2, 3, 3), is_causal=True))
    assert c.kind == "identical" and c.n_diff == 0
    # jax keeps the same cells but its fill is finite (replace): only the fill differs
    assert compare(a, b).kind == "fill-only"


def test_inversion_is_recognised():
    c = compare(canonical_mask("torch-sdpa-bool", TRIL, (2, 2, 3, 3)),
                canonical_mask("torch-mha-bool", TRIL, (2, 2, 3, 3)))
    assert c.kind == "inverted"
    assert c.n_diff == 2 * 2 * 9
    assert "polarity" in c.verdict


def test_inverted_mask_under_generated_parts():
    # the same 2-D mask text: transformers reads 1 = token, MHA's key_padding_mask reads True = pad
    a = canonical_mask("hf-2d", "[[1,1,0]]", (1, 1, 3, 3))  # plus a causal part
    b = canonical_mask("torch-mha-key-padding", "[[1,1,0]]", (1, 1, 3, 3))
    c = compare(a, b)
    assert c.kind == "inverted-mask"
    assert not np.array_equal(a.keep, ~b.keep)


def test_top_left_vs_bottom_right_shift():
    a = canonical_mask("torch-sdpa-bool", None, (1, 1, 2, 5), is_causal=True)
    b = canonical_mask("flash-attn", None, (1, 1, 2, 5), is_causal=True)
    c = compare(a, b)
    assert c.kind == "causal-shift"
    assert "shift of 3 = K - Q" in c.verdict
    assert c.n_diff == 3 + 3  # row 0 gains keys 1..3, row 1 keys 2..4


def test_finite_fill_only_difference_names_the_fully_masked_outcomes():
    a = canonical_mask("hf-2d", "[[0,1,1]]", (1, 1, 3, 3), hf_impl="sdpa")
    b = canonical_mask("hf-2d", "[[0,1,1]]", (1, 1, 3, 3), hf_impl="eager")
    c = compare(a, b)
    assert c.kind == "fill-only"
    assert "zeros vs uniform" in c.verdict


def test_outcome_only_difference():
    a = canonical_mask("torch-sdpa-bool", "[[0,0],[1,1]]", (1, 1, 2, 2))
    b = canonical_mask("torch-mha-bool", "[[1,1],[0,0]]@bool", (1, 1, 2, 2))
    c = compare(a, b)
    assert c.kind == "outcome-only"
    assert "zeros vs nan" in c.verdict


def test_bias_per_row_constant_is_softmax_invariant():
    a = canonical_mask("alibi", None, (1, 2, 3, 3), is_causal=True)
    b = canonical_mask("alibi", None, (1, 2, 3, 3), is_causal=True, alibi_form="bloom")
    assert compare(a, b).kind == "bias-constant"
    c = compare(canonical_mask("alibi", None, (1, 2, 3, 3)),
                canonical_mask("alibi", None, (1, 2, 3, 3), alibi_form="bloom"))
    assert c.kind == "bias"


def test_plain_difference_lists_cells():
    a = canonical_mask("torch-sdpa-bool", "[[1,1,1]]", (1, 1, 1, 3))
    b = canonical_mask("torch-sdpa-bool", "[[1,0,1]]", (1, 1, 1, 3))
    c = compare(a, b)
    assert c.kind == "differs" and "(0,0,0,1)" in c.verdict


def test_compare_needs_the_same_scores():
    with pytest.raises(TracerError):
        compare(canonical_mask("torch-sdpa-bool", None, (1, 1, 2, 2)), canonical_mask("torch-sdpa-bool", None, (1, 1, 3, 3)))


# ---------- check-weights ----------


def masked_softmax(s, keep):
    x = np.where(keep, s, -np.inf)
    m = np.max(x, -1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.where(keep, np.exp(x - m), 0)
    tot = e.sum(-1, keepdims=True)
    return np.divide(e, tot, out=np.zeros_like(e), where=tot > 0)


@pytest.fixture
def scores():
    return np.random.default_rng(1).normal(size=(1, 2, 3, 3)).astype(np.float32)


def statuses(check) -> dict[str, str]:
    return {c.name: c.status for c in check.checks}


def test_correct_weights_pass(scores):
    r = canonical_mask("torch-sdpa-bool", None, (1, 2, 3, 3), is_causal=True)
    w = masked_softmax(scores, r.keep)
    check = check_weights(r, w, scores)
    assert not check.failed(), check.to_json()
    assert statuses(check)["expected weights"] == "ok"


def test_mask_after_softmax_is_caught(scores):
    r = canonical_mask("torch-sdpa-bool", None, (1, 2, 3, 3), is_causal=True)
    full = masked_softmax(scores, np.ones_like(r.keep))
    check = check_weights(r, full * r.keep, scores)
    st = statuses(check)
    assert st["row sums"] == "fail" and "renormalising" in check.checks[1].detail
    assert st["blocked cells"] == "ok"


def test_unapplied_mask_is_caught(scores):
    r = canonical_mask("torch-sdpa-bool", None, (1, 2, 3, 3), is_causal=True)
    full = masked_softmax(scores, np.ones_like(r.keep))
    st = statuses(check_weights(r, full, scores))
    assert st["blocked cells"] == "fail" and st["unmasked rows"] == "fail"


def test_shifted_mask_is_caught(scores):
    r = canonical_mask("torch-sdpa-bool", None, (1, 2, 3, 3), is_causal=True)
    shifted = masked_softmax(scores, np.triu(np.ones((3, 3), bool)))
    assert statuses(check_weights(r, shifted))["blocked cells"] == "fail"


def test_nan_rows_and_fully_masked_outcomes():
    r = canonical_mask("hf-2d", "[[0,1,1]]", (1, 1, 3, 3))
    w = masked_softmax(np.zeros((1, 1, 3, 3)), r.keep)
    assert statuses(check_weights(r, w))["fully masked rows"] == "ok"  # zeros, as sdpa gives
    w_nan = w.copy()
    w_nan[0, 0, 0] = np.nan
    check = check_weights(r, w_nan)
    assert statuses(check)["fully masked rows"] == "info" and statuses(check)["NaN rows"] == "info"
    w_nan[0, 0, 2] = np.nan
    assert statuses(check_weights(r, w_nan))["NaN rows"] == "fail"


def test_load_weights_from_a_trace_with_sibling_scores(tmp_path, scores):
    keep = np.tril(np.ones((3, 3), bool))
    w = masked_softmax(scores, keep).astype(np.float32)

    def step(name, a):
        return Step(name, ("batch", "heads", "q_len", "kv_len"), "", None, a.shape, str(a.dtype), tensor_stats(a), a)

    path = tmp_path / "t.safetensors"
    Trace([step("blocks.0.attn.scores", scores), step("blocks.0.attn.weights", w)], {}).save(path)
    weights, sc, label, sc_label = load_weights(f"{path}:blocks.0.attn.weights")
    assert np.array_equal(weights, w) and np.array_equal(sc, scores)
    assert sc_label.endswith("blocks.0.attn.scores")
    with pytest.raises(TracerError, match="no step"):
        load_weights(f"{path}:blocks.9.attn.weights")
    with pytest.raises(TracerError, match="TRACE:STEP"):
        load_weights("justafile")
