"""Every warning code ML001-ML013 fires on a case built for it, and stays quiet on a clean one."""

from __future__ import annotations

import numpy as np
import pytest

from tracer.masks.conventions import canonical_mask
from tracer.masks.warnings import CODES

TRIU1 = "[[0,1,1],[0,0,1],[0,0,0]]"


def codes(result) -> set[str]:
    return set(result.codes())


def message(result, code) -> str:
    return next(w.message for w in result.warnings if w.code == code)


def test_clean_causal_mask_is_quiet():
    r = canonical_mask("torch-sdpa-bool", "[[1,0,0],[1,1,0],[1,1,1]]", (1, 1, 3, 3))
    assert r.warnings == []
    assert not r.fired()


def test_ml001_future_only_mask_under_a_keep_convention():
    r = canonical_mask("torch-sdpa-bool", TRIU1, (1, 1, 3, 3))
    assert "ML001" in codes(r)
    assert "MHA" in message(r, "ML001")


def test_ml001_tril_under_a_block_convention():
    r = canonical_mask("torch-mha-bool", "[[1,0,0],[1,1,0],[1,1,1]]@bool", (1, 1, 3, 3))
    assert "ML001" in codes(r)


def test_ml001_mostly_padding_hf_mask():
    r = canonical_mask("hf-2d", "[[1,0,0,0],[0,1,0,0]]", (2, 1, 4, 4))
    assert "only 25%" in message(r, "ML001")


def test_ml002_zero_one_mask_added_to_scores():
    r = canonical_mask("torch-sdpa-float", "[[1,0],[1,1]]", (1, 1, 2, 2))
    assert "ML002" in codes(r)
    assert r.keep.all()  # nothing is blocked, which is the point


@pytest.mark.parametrize("convention, mask, level", [
    ("bert-extended", "[[1,1,0]]", "warn"),  # -10000 leaks into fully masked rows
    ("hf-4d-eager", "[[[[0,min],[0,0]]]]", "info"),  # finfo.min is the framework's own fill
])
def test_ml003_finite_fill_levels(convention, mask, level):
    r = canonical_mask(convention, mask, (1, 1, 2, 3) if convention == "bert-extended" else (1, 1, 2, 2))
    w = next(w for w in r.warnings if w.code == "ML003")
    assert w.level == level


def test_ml003_score_range_raises_the_bar():
    r = canonical_mask("torch-sdpa-float", "[[0,-1e5]]", (1, 1, 1, 2))
    assert next(w for w in r.warnings if w.code == "ML003").level == "info"
    r = canonical_mask("torch-sdpa-float", "[[0,-1e5]]", (1, 1, 1, 2), score_range=2e4)
    assert next(w for w in r.warnings if w.code == "ML003").level == "warn"


def test_ml004_fill_beyond_the_score_dtype():
    r = canonical_mask("hf-4d-eager", np.array([[[[0.0, -1e9]]]], np.float32), (1, 1, 1, 2), score_dtype="float16")
    assert "ML004" in codes(r)
    assert not r.soft.any()  # it became -inf: a hard block


def test_ml004_two_finfo_min_planes_overflow():
    r = canonical_mask("torch-mha-float", "[[0,min],[0,0]]", (2, 1, 2, 2), kpm="[[0,min],[0,0]]@float32")
    assert "ML004" in codes(r)


def test_ml004_literal_overflow_on_cast():
    r = canonical_mask("torch-sdpa-float", "[[0,-1e9]]@float16", (1, 1, 1, 2), score_dtype="float16")
    assert "became -inf" in message(r, "ML004")


def test_ml005_fully_masked_rows_name_the_outcome():
    r = canonical_mask("hf-2d", "[[0,0,1,1],[1,1,1,1]]", (2, 1, 4, 4), past=0)
    m = message(r, "ML005")
    assert "b=0 q=0..1" in m and "zeros" in m and "NaN" in m


def test_ml006_rank3_mask_lands_on_heads():
    r = canonical_mask("torch-sdpa-bool", np.ones((2, 1, 3), bool), (2, 2, 3, 3))
    assert "HEADS" in message(r, "ML006")


def test_ml006_padding_rows_read_as_queries():
    r = canonical_mask("torch-sdpa-bool", "[[0,1],[1,1]]", (2, 1, 2, 2))
    assert "QUERIES" in message(r, "ML006")


def test_ml006_right_padding_rows_read_as_queries_too():
    # the default padding side: rows kept, then blocked (issue 16: only left padding fired)
    r = canonical_mask("torch-sdpa-bool", "[[1,1,0],[1,1,1]]@bool", (2, 2, 2, 3))
    assert "QUERIES" in message(r, "ML006")
    r = canonical_mask("torch-sdpa-bool", "[[1,1,0,0],[1,1,1,0]]@bool", (2, 1, 2, 4))
    assert "QUERIES" in message(r, "ML006")


def test_ml006_is_quiet_for_a_causal_mask_of_the_queries():
    r = canonical_mask("torch-sdpa-bool", np.tril(np.ones((2, 2), bool)), (2, 1, 2, 2))  # tril: keeps k <= q
    assert "ML006" not in codes(r)
    r = canonical_mask("torch-sdpa-bool", np.ones((2, 3), bool), (2, 1, 2, 3))  # nothing blocked: nothing misread
    assert "ML006" not in codes(r)


def test_ml007_mha_mask_built_with_repeat():
    N, H, L = 2, 2, 3
    per_sample = np.stack([np.zeros((L, L), bool), np.triu(np.ones((L, L), bool), 1)])  # (N,L,S)
    tiled = np.tile(per_sample, (H, 1, 1))  # what m.repeat(H,1,1) gives
    r = canonical_mask("torch-mha-bool", tiled, (N, H, L, L))
    assert "repeat_interleave" in message(r, "ML007")
    right = np.repeat(per_sample, H, axis=0)  # repeat_interleave
    assert "ML007" not in codes(canonical_mask("torch-mha-bool", right, (N, H, L, L)))


def test_ml008_causal_alignment_when_q_differs_from_k():
    r = canonical_mask("flash-attn", None, (1, 1, 2, 5), is_causal=True)
    w = next(w for w in r.warnings if w.code == "ML008")
    assert w.data["top_left"].tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]]
    assert w.data["bottom_right"].tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert "ML008" not in codes(canonical_mask("flash-attn", None, (1, 1, 3, 3), is_causal=True))


def test_ml008_past_with_top_left():
    r = canonical_mask("torch-sdpa-bool", None, (1, 1, 3, 3), is_causal=True, past=2)
    assert "cache is ignored" in message(r, "ML008")


def test_ml009_is_causal_plus_mask():
    r = canonical_mask("torch-sdpa-bool", "[[1,1,0],[1,1,1],[1,1,1]]", (1, 1, 3, 3), is_causal=True)
    assert "ML009" in codes(r)
    assert np.array_equal(r.keep[0, 0], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])  # ANDed, as the CPU flash kernel does


def test_ml010_mixed_key_padding_and_attn_mask_dtypes():
    r = canonical_mask("torch-mha-bool", "[[0,1],[0,0]]@bool", (2, 1, 2, 2), kpm="[[0,0],[0,-inf]]@float32")
    assert "deprecated" in message(r, "ML010")


def test_ml010_float_key_padding_of_zero_one():
    r = canonical_mask("torch-mha-key-padding", "[[0,1,1],[0,0,1]]@float32", (2, 1, 3, 3))
    assert "ADDED" in message(r, "ML010")


def test_ml011_window_names_the_equivalents():
    r = canonical_mask("hf-2d", None, (1, 1, 5, 5), window=4)
    m = message(r, "ML011")
    assert "window_size=(3,0)" in m and "n_swa=4" in m and "W+1=5" in m


def test_ml012_left_padding_prints_position_ids():
    r = canonical_mask("hf-2d", "[[0,0,1,1],[1,1,1,1]]", (2, 1, 4, 4))
    w = next(w for w in r.warnings if w.code == "ML012")
    assert w.data["position_ids_v5"].tolist()[0] == [0, 0, 0, 1]
    assert w.data["position_ids_v4"].tolist()[0] == [1, 1, 0, 1]


def test_ml013_nan_in_the_mask_poisons_the_row():
    r = canonical_mask("torch-sdpa-float", "[[0,nan],[0,0]]", (1, 1, 2, 2))
    w = next(w for w in r.warnings if w.code == "ML013")
    assert w.level == "error"
    assert r.row_outcome(0, 0, 0) == "nan" and r.row_outcome(0, 0, 1) != "nan"


def test_codes_are_stable_and_complete():
    assert list(CODES) == [f"ML{i:03d}" for i in range(1, 14)]
