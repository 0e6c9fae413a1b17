"""Each convention's semantics on cases built by hand from the verified examples of the reference doc
(/work/shared/reference/mask-conventions.md §2)."""

from __future__ import annotations

import numpy as np
import pytest

from tracer.errors import TracerError
from tracer.masks.conventions import CONVENTIONS, canonical_mask, get_convention, mask_override_parts
from tracer.masks.generated import alibi_slopes, t5_bucket
from tracer.masks.outcomes import expected_weights


def pattern(rows: list[str]) -> np.ndarray:
    """['1100', '1110'] -> bool [2, 4]"""
    return np.array([[c == "1" for c in r] for r in rows])


def slice_of(result, b=0, h=0) -> np.ndarray:
    return result.keep[b, h]


# ---------- transformers ----------


def test_hf_2d_left_padding_gives_empty_pad_query_rows():
    r = canonical_mask("hf-2d", "[[0,0,1,1],[1,1,1,1]]", (2, 1, 4, 4), past=0)
    assert np.array_equal(slice_of(r, 0), pattern(["0000", "0000", "0010", "0011"]))
    assert np.array_equal(slice_of(r, 1), np.tril(np.ones((4, 4), bool)))
    assert r.fully_masked() == [(0, 0, 0), (0, 0, 1)]
    assert r.row_outcome(0, 0, 0) == "zeros"  # sdpa


def test_hf_2d_decode_step_is_bottom_right():
    r = canonical_mask("hf-2d", "[[0,0,1,1,1]]", (1, 1, 1, 5), past=4)
    assert np.array_equal(slice_of(r), pattern(["00111"]))


def test_hf_2d_chunked_prefill_in_cache_index_space():
    r = canonical_mask("hf-2d", "[[1,1,1,1,1]]", (1, 1, 2, 5), past=3)
    assert np.array_equal(slice_of(r), pattern(["11110", "11111"]))
    assert r.causal_offset == 3


def test_hf_2d_default_past_is_mask_length_minus_q():
    r = canonical_mask("hf-2d", "[[1,1,1,1,1]]", (1, 1, 2, 5))
    assert r.causal_offset == 3


def test_hf_2d_sliding_window_keeps_w_keys_including_self():
    r = canonical_mask("hf-2d", None, (1, 1, 5, 5), window=2)
    assert np.array_equal(slice_of(r), pattern(["10000", "11000", "01100", "00110", "00011"]))


def test_hf_2d_short_mask_is_right_padded_as_blocked_static_slots():
    r = canonical_mask("hf-2d", "[[1,1,1]]", (1, 1, 1, 5), past=2)
    assert np.array_equal(slice_of(r), pattern(["11100"]))


def test_hf_2d_bidirectional_has_no_causal_part():
    r = canonical_mask("hf-2d", "[[1,1,0]]", (1, 1, 3, 3), bidirectional=True)
    assert np.array_equal(slice_of(r), pattern(["110", "110", "110"]))
    assert r.causal_offset is None


def test_hf_2d_eager_uses_finfo_min_and_gives_uniform_rows():
    r = canonical_mask("hf-2d", "[[0,1,1]]", (1, 1, 3, 3), hf_impl="eager")
    assert r.soft[0, 0, 0].all() and not r.keep[0, 0, 0].any()
    assert r.fill[0, 0, 0, 0] == float(np.finfo(np.float32).min)
    assert r.row_outcome(0, 0, 0) == "uniform"
    w = expected_weights(r, np.array([1.0, 5.0, -2.0]))
    assert np.allclose(w[0, 0, 0], 1 / 3)


def test_hf_2d_nonzero_means_keep():
    r = canonical_mask("hf-2d", "[[0,2,7]]", (1, 1, 3, 3), bidirectional=True)
    assert np.array_equal(slice_of(r)[0], [False, True, True])


def test_hf_4d_mask_must_be_4d_and_is_passed_through():
    with pytest.raises(TracerError, match="4-D"):
        canonical_mask("hf-4d-sdpa", "[[1,0],[1,1]]@bool", (1, 1, 2, 2))
    r = canonical_mask("hf-4d-sdpa", "[[[[1,0],[1,1]]]]", (1, 2, 2, 2))
    assert np.array_equal(slice_of(r, 0, 1), pattern(["10", "11"]))


def test_hf_4d_eager_adds_the_mask():
    r = canonical_mask("hf-4d-eager", "[[[[0,min],[0,0]]]]", (1, 1, 2, 2))
    assert np.array_equal(slice_of(r), pattern(["10", "11"]))
    assert r.soft[0, 0, 0, 1]


def test_hf_legacy_4d_keeps_exactly_ones():
    r = canonical_mask("hf-legacy-4d", "[[[[1,0,2]]]]", (1, 1, 1, 3))
    assert np.array_equal(slice_of(r), pattern(["100"]))
    assert r.soft[0, 0, 0, 1] and r.soft[0, 0, 0, 2]


def test_bert_extended_fill_is_minus_ten_thousand_and_leaks_as_unmasked():
    r = canonical_mask("bert-extended", "[[0,0,0]]", (1, 1, 2, 3))
    assert np.all(r.fill[r.soft] == -10000.0)
    assert r.row_outcome(0, 0, 0) == "unmasked"  # float32 resolves scores next to -1e4
    scores = np.array([0.5, 2.0, -1.0])
    w = expected_weights(r, scores)
    e = np.exp(scores - scores.max())
    assert np.allclose(w[0, 0, 0], e / e.sum(), atol=1e-3)
    r16 = canonical_mask("bert-extended", "[[0,0,0]]", (1, 1, 2, 3), score_dtype="float16")
    assert r16.row_outcome(0, 0, 0) == "uniform"  # float16 spacing at 1e4 is 8


# ---------- torch ----------


def test_sdpa_bool_true_means_keep():
    r = canonical_mask("torch-sdpa-bool", "[[1,0],[1,1]]", (1, 1, 2, 2))
    assert np.array_equal(slice_of(r), pattern(["10", "11"]))


def test_sdpa_rank3_mask_lands_on_heads():
    m = np.array([[[True, True, False]], [[True, True, True]]])  # (2,1,3), meant as (B,1,K)
    r = canonical_mask("torch-sdpa-bool", m, (2, 2, 3, 3))
    for b in range(2):
        assert np.array_equal(slice_of(r, b, 0), pattern(["110"] * 3))  # head 0 got sample 0's row
        assert np.array_equal(slice_of(r, b, 1), pattern(["111"] * 3))
    assert "ML006" in r.codes()
    assert r.steps[0].roles == ("H", "Q", "K")


def test_sdpa_rank3_mask_that_cannot_land_raises():
    with pytest.raises(TracerError, match="must match the size"):
        canonical_mask("torch-sdpa-bool", np.ones((2, 3, 3), bool), (2, 3, 3, 3))


def test_sdpa_rejects_int_and_1d_masks_with_torch_text():
    with pytest.raises(TracerError, match="Expected attn_mask dtype to be bool or float"):
        canonical_mask("torch-sdpa-bool", "[[1,0],[1,1]]@int64", (1, 1, 2, 2))
    with pytest.raises(TracerError, match="IndexError: Dimension out of range"):
        canonical_mask("torch-sdpa-bool", "[1,0]@bool", (1, 1, 2, 2))
    with pytest.raises(TracerError, match="double"):
        canonical_mask("torch-sdpa-float", "[[0,0],[0,0]]@float64", (1, 1, 2, 2))


def test_sdpa_float_is_additive_with_hard_soft_and_bias():
    r = canonical_mask("torch-sdpa-float", "[[0, -inf, -1e9, 0.5]]", (1, 1, 1, 4))
    assert r.keep[0, 0, 0].tolist() == [True, False, False, True]
    assert r.soft[0, 0, 0].tolist() == [False, False, True, False]
    assert r.bias[0, 0, 0, 3] == 0.5


def test_sdpa_is_causal_is_top_left_and_bottom_right_on_request():
    r = canonical_mask("torch-sdpa-bool", None, (1, 1, 2, 5), is_causal=True)
    assert np.array_equal(slice_of(r), pattern(["10000", "11000"]))
    r = canonical_mask("torch-sdpa-bool", None, (1, 1, 2, 5), is_causal=True, causal_align="bottom-right")
    assert np.array_equal(slice_of(r), pattern(["11110", "11111"]))


def test_sdpa_refuses_a_window():
    with pytest.raises(TracerError, match="--window has no meaning"):
        canonical_mask("torch-sdpa-bool", None, (1, 1, 3, 3), window=2)


def test_causal_bias_variants():
    lr = canonical_mask("torch-causal-lower-right", None, (1, 1, 5, 2))
    assert np.array_equal(slice_of(lr), pattern(["00", "00", "00", "10", "11"]))
    ul = canonical_mask("torch-causal-upper-left", None, (1, 1, 2, 5))
    assert np.array_equal(slice_of(ul), pattern(["10000", "11000"]))


def test_mha_bool_true_means_block():
    r = canonical_mask("torch-mha-bool", "[[0,1,1],[0,0,1],[0,0,0]]@bool", (2, 4, 3, 3))
    assert np.array_equal(slice_of(r, 1, 3), np.tril(np.ones((3, 3), bool)))


def test_mha_3d_mask_is_indexed_b_times_h_plus_h():
    N, H = 2, 2
    m = np.zeros((N * H, 2, 2), dtype=bool)
    m[1] = True  # block everything in slice 1
    r = canonical_mask("torch-mha-bool", m, (N, H, 2, 2))
    assert not r.keep[0, 1].any()  # slice 1 is (b=0, h=1)
    assert r.keep[1, 0].all() and r.keep[0, 0].all() and r.keep[1, 1].all()
    assert r.row_outcome(0, 1, 0) == "nan"  # need_weights=True


def test_mha_rejects_n_l_s_masks_and_uint8_with_torch_text():
    with pytest.raises(TracerError, match=r"The shape of the 3D attn_mask is torch.Size\(\[2, 3, 3\]\), but should be \(4, 3, 3\)"):
        canonical_mask("torch-mha-bool", np.ones((2, 3, 3), bool), (2, 2, 3, 3))
    with pytest.raises(TracerError, match="only bool and floating types of attn_mask"):
        canonical_mask("torch-mha-bool", "[[0,1],[0,0]]@uint8", (1, 1, 2, 2))


def test_mha_need_weights_false_gives_zeros():
    r = canonical_mask("torch-mha-bool", "[[1,1],[0,0]]@bool", (1, 1, 2, 2), need_weights=False)
    assert r.row_outcome(0, 0, 0) == "zeros"


def test_mha_key_padding_true_means_pad_and_is_viewed_per_sample():
    r = canonical_mask("torch-mha-key-padding", "[[0,0,1],[1,0,0]]@bool", (2, 3, 2, 3))
    assert np.array_equal(slice_of(r, 0, 2), pattern(["110", "110"]))
    assert np.array_equal(slice_of(r, 1, 1), pattern(["011", "011"]))
    with pytest.raises(TracerError, match=r"Expected key_padded_mask.shape\[0\] to be 2, but got 3"):
        canonical_mask("torch-mha-key-padding", np.zeros((3, 3), bool), (2, 1, 3, 3))


def test_mha_attn_mask_and_key_padding_combine():
    r = canonical_mask("torch-mha-bool", "[[0,1],[0,0]]@bool", (2, 1, 2, 2), kpm="[[0,0],[1,0]]@bool")
    assert np.array_equal(slice_of(r, 0), pattern(["10", "11"]))
    assert np.array_equal(slice_of(r, 1), pattern(["00", "01"]))


def test_square_subsequent_mask_is_square_top_left():
    r = canonical_mask("torch-square-subsequent", None, (1, 1, 3, 3))
    assert np.array_equal(slice_of(r), np.tril(np.ones((3, 3), bool)))
    with pytest.raises(TracerError, match="2D attn_mask"):
        canonical_mask("torch-square-subsequent", None, (1, 1, 2, 3))


def test_flex_predicates():
    r = canonical_mask("flex-mask-mod", "document(0,0,1,1) & causal", (1, 1, 4, 4))
    assert np.array_equal(slice_of(r), pattern(["1000", "1100", "0010", "0011"]))
    r = canonical_mask("flex-mask-mod", "prefix(2)", (1, 1, 3, 3))
    assert np.array_equal(slice_of(r), pattern(["110", "110", "111"]))
    with pytest.raises(TracerError, match="unknown mask_mod"):
        canonical_mask("flex-mask-mod", "causal & wobble(1)", (1, 1, 3, 3))


# ---------- JAX, Flax, Keras ----------


def test_jax_causal_is_top_left_and_fill_replaces():
    r = canonical_mask("jax-bool", None, (1, 1, 2, 5), is_causal=True)
    assert np.array_equal(slice_of(r), pattern(["10000", "11000"]))
    assert r.fill_mode == "replace"
    assert r.fill[r.soft][0] == pytest.approx(-0.7 * float(np.finfo(np.float32).max))


def test_jax_local_window_band_of_two():
    r = canonical_mask("jax-bool", None, (1, 1, 4, 4), window_lr=(1, 0))
    assert np.array_equal(slice_of(r), pattern(["1000", "1100", "0110", "0011"]))


def test_jax_rejects_float_masks():
    with pytest.raises(TracerError, match="ValueError: the mask must be bool"):
        canonical_mask("jax-bool", "[[0.0, 1.0]]", (1, 1, 1, 2))


def test_jax_seqlens():
    r = canonical_mask("jax-seqlens", "[3]", (1, 1, 5, 5), q_lengths=(3,))
    assert np.array_equal(slice_of(r), pattern(["11100", "11100", "11100", "00000", "00000"]))
    assert r.row_outcome(0, 0, 4) == "uniform"


def test_flax_truthy_keep_and_uniform_padded_rows():
    r = canonical_mask("flax-mask", "[[1,1,0,0]]", (1, 1, 4, 4), is_causal=True)
    assert np.array_equal(slice_of(r), pattern(["1000", "1100", "1100", "1100"]))
    w = expected_weights(r, np.zeros((4, 4)) + np.arange(4))
    assert np.allclose(w[0, 0, 0], [1, 0, 0, 0])
    pad_rows = canonical_mask("flax-mask", "[[[[0,0],[0,0]]]]", (1, 1, 2, 2))
    assert np.allclose(expected_weights(pad_rows, np.array([[3.0, -1.0], [0.0, 2.0]]))[0, 0], 0.5)


def test_keras_inserts_head_axis_and_is_top_left():
    r = canonical_mask("keras-mha", None, (1, 1, 3, 4), is_causal=True)
    assert np.array_equal(slice_of(r), pattern(["1000", "1100", "1110"]))
    r = canonical_mask("keras-mha", np.ones((2, 3, 4), bool), (2, 2, 3, 4))
    assert r.steps[0].shape_out == (2, 1, 3, 4)


def test_keras_batch_by_keys_mask_is_read_as_queries():
    with pytest.raises(TracerError, match="must be broadcastable"):
        canonical_mask("keras-mha", np.ones((2, 4), bool), (2, 1, 3, 4))
    m = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0]], bool)  # (B,S) with B == T == 3
    r = canonical_mask("keras-mha", m, (3, 1, 3, 3))
    assert np.array_equal(slice_of(r, 0), m)  # every sample gets row q of the batch mask
    assert "ML006" in r.codes()


def test_keras3_zeroes_fully_masked_rows_keras2_does_not():
    assert canonical_mask("keras-mha", "[[[0,0]]]", (1, 1, 1, 2)).row_outcome(0, 0, 0) == "zeros"
    r2 = canonical_mask("keras-mha", "[[[0,0]]]", (1, 1, 1, 2), keras2=True)
    assert r2.fill[0, 0, 0, 0] == -1e9 and r2.row_outcome(0, 0, 0) == "uniform"


# ---------- kernels ----------


@pytest.mark.parametrize("version, q, k, rows", [
    ("2.1", 2, 5, ["11110", "11111"]),
    ("2.0", 2, 5, ["10000", "11000"]),
    ("2.1", 5, 2, ["00", "00", "00", "10", "11"]),
])
def test_flash_attn_causal_by_version(version, q, k, rows):
    r = canonical_mask("flash-attn", None, (1, 1, q, k), is_causal=True, fa_version=version)
    assert np.array_equal(slice_of(r), pattern(rows))


def test_flash_attn_window_and_no_mask_tensor():
    r = canonical_mask("flash-attn", None, (1, 1, 3, 5), window_lr=(1, 0))
    assert np.array_equal(slice_of(r), pattern(["01100", "00110", "00011"]))
    with pytest.raises(TracerError, match="takes no mask tensor"):
        canonical_mask("flash-attn", "[[1,1]]", (1, 1, 1, 2))


def test_xformers_bias_needs_the_exact_shape():
    with pytest.raises(TracerError, match=r"Invalid shape for attention bias: torch.Size\(\[1, 1, 2, 2\]\) \(expected \(1, 2, 2, 2\)\)"):
        canonical_mask("xformers-bias", np.zeros((1, 1, 2, 2), np.float32), (1, 2, 2, 2))
    r = canonical_mask("xformers-bias", None, (1, 1, 2, 4), is_causal=True, causal_align="bottom-right")
    assert np.array_equal(slice_of(r), pattern(["1110", "1111"]))
    r = canonical_mask("xformers-bias", None, (1, 1, 2, 4), is_causal=True)
    assert np.array_equal(slice_of(r), pattern(["1000", "1100"]))


def test_mlx_causal_is_bottom_right():
    r = canonical_mask("mlx", "causal", (1, 1, 2, 4))
    assert np.array_equal(slice_of(r), pattern(["1110", "1111"]))


def test_ggml_ne_order_rows_padding_and_head_modulo():
    # NumPy order (1, 2, 4, 3): two head slices, one padding row beyond Q=3
    m = np.zeros((1, 2, 4, 3), np.float32)
    m[0, 0] = np.where(np.tril(np.ones((4, 3), bool)), 0, -np.inf)
    m[0, 1, :, 2] = -np.inf
    r = canonical_mask("ggml-kq-mask", m, (1, 4, 3, 3))
    assert np.array_equal(slice_of(r, 0, 2), slice_of(r, 0, 0))  # head 2 uses slice 2 % 2 = 0
    assert np.array_equal(slice_of(r, 0, 3), pattern(["110"] * 3))
    flipped = np.transpose(m, (3, 2, 1, 0))
    r2 = canonical_mask("ggml-kq-mask", flipped, (1, 4, 3, 3), ggml_ne_order=True)
    assert np.array_equal(r.keep, r2.keep)
    with pytest.raises(TracerError, match="not a multiple"):
        canonical_mask("ggml-kq-mask", m, (1, 3, 3, 3))


def test_ggml_positions_with_swa_keeps_n_swa_keys_including_self():
    r = canonical_mask("ggml-kq-mask", None, (1, 1, 2, 6),
                       positions=(np.array([4, 5]), np.array([0, 1, 2, 3, 4, -1])), window=3)
    # token at position 5 sees positions 3..5, but the cell of position 5 is empty (-1)
    assert np.array_equal(slice_of(r), pattern(["001110", "000110"]))
    assert r.hard_outcome == "nan"  # llama.cpp CPU softmax over -inf


# ---------- biases ----------


def test_alibi_slopes_and_fa_form():
    assert np.allclose(alibi_slopes(4), [0.25, 0.0625, 0.015625, 0.00390625])
    r = canonical_mask("alibi", None, (1, 4, 2, 3))
    # bottom-right: query i sits at key slot i + 1
    assert r.bias[0, 0, 0].tolist() == pytest.approx([-0.25, 0.0, -0.25])
    assert r.bias[0, 1, 1].tolist() == pytest.approx([-0.125, -0.0625, 0.0])
    assert r.keep.all()


def test_alibi_bloom_form_differs_by_a_row_constant_only_when_causal():
    fa = canonical_mask("alibi", None, (1, 2, 3, 3), is_causal=True)
    bloom = canonical_mask("alibi", None, (1, 2, 3, 3), is_causal=True, alibi_form="bloom")
    diff = np.where(fa.keep, fa.bias - bloom.bias, np.nan)
    spread = np.nanmax(diff, -1) - np.nanmin(diff, -1)
    assert np.allclose(spread, 0)


def test_t5_buckets_by_hand():
    rel = np.array([0, 1, -1, 3, -3, -20, 20])
    # bidirectional, 32 buckets: 16 per direction, 8 exact; positive distances start at 16
    assert t5_bucket(rel, True).tolist()[:5] == [0, 17, 1, 19, 3]
    # causal: future positions -> 0; -20 -> 16 + int(log(20/16)/log(128/16)*16) = 17
    assert t5_bucket(rel, False).tolist() == [0, 0, 1, 0, 3, 17, 0]


def test_t5_bias_from_table_and_fp16_overflow_with_the_causal_fill():
    table = np.arange(32 * 2, dtype=np.float32).reshape(32, 2) * -1.0
    r = canonical_mask("t5-relbias", table, (1, 2, 2, 2), past=0, bidirectional=True)
    assert r.bias[0, 1, 0, 1] == table[17, 1]
    r16 = canonical_mask("t5-relbias", None, (1, 1, 2, 2), past=0, is_causal=True, score_dtype="float16")
    assert np.array_equal(slice_of(r16), pattern(["10", "11"]))


# ---------- the entry point ----------


def test_every_convention_is_listed_with_a_summary():
    assert len(CONVENTIONS) >= 24
    assert get_convention("additive").name == "torch-sdpa-float"
    with pytest.raises(TracerError, match="unknown convention"):
        get_convention("torch-nope")


def test_canonical_mask_for_the_engine():
    r = canonical_mask("hf-2d", np.array([[0, 1, 1]]), (1, 1, 3, 3), hf_impl="eager")
    keep, bias, note = mask_override_parts(r)
    assert keep.dtype == bool and keep.shape == (1, 1, 3, 3)
    assert bias is None
    assert "soft-blocked" in note
    with pytest.raises(TracerError):
        canonical_mask("torch-sdpa-bool", np.ones((3, 5), bool), (1, 1, 3, 4))


def test_expected_weights_match_a_plain_masked_softmax():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(2, 2, 3, 3))
    r = canonical_mask("torch-sdpa-bool", None, (2, 2, 3, 3), is_causal=True)
    x = np.where(np.tril(np.ones((3, 3), bool)), s, -np.inf)
    ref = np.exp(x - x.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    assert np.allclose(expected_weights(r, s), ref, atol=1e-6)
