"""The math of single steps, checked against definitions (not against the code's own output)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracer.arch.spec import RopeSpec
from tracer.engine import ops
from tracer.engine.rope import apply_rotary, cos_sin, inverse_frequencies
from tracer.engine.masks import build_keep, causal_keep, window_keep

RNG = np.random.default_rng(0)


def test_softmax_rows_sum_to_one_and_fully_masked_rows_are_zero_not_nan():
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    x[0, 1, :] = -np.inf
    x[1, 2, 3] = -np.inf
    p = ops.softmax(x)
    assert not np.isnan(p).any()
    np.testing.assert_array_equal(p[0, 1], 0.0)
    assert p[1, 2, 3] == 0.0
    sums = p.sum(-1)
    sums[0, 1] = 1.0
    np.testing.assert_allclose(sums, 1.0, rtol=1e-6)
    e = np.exp(x[1, 0].astype(np.float64))
    np.testing.assert_allclose(p[1, 0], e / e.sum(), rtol=1e-6)


def test_layer_norm_and_rms_norm_definitions():
    x = RNG.standard_normal((2, 8)).astype(np.float64)
    w, b = RNG.standard_normal(8), RNG.standard_normal(8)
    ln = ops.layer_norm(x, w, b, 1e-5)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(ln, (x - mu) / np.sqrt(var + 1e-5) * w + b, rtol=1e-12)
    rms = ops.rms_norm(x, w, 1e-6, offset=1.0)
    np.testing.assert_allclose(rms, x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * (1 + w), rtol=1e-12)


def test_activations_match_their_formulas():
    x = np.linspace(-5, 5, 101)
    np.testing.assert_allclose(ops.gelu_erf(x), [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x], rtol=1e-14)
    np.testing.assert_allclose(ops.silu(x), x / (1 + np.exp(-x)), rtol=1e-14)
    np.testing.assert_array_equal(ops.relu(x), np.where(x > 0, x, 0))
    x32 = x.astype(np.float32)
    assert np.abs(ops.gelu_erf(x32) - ops.gelu_erf(x)).max() < 3e-6


@pytest.mark.parametrize("fn", [ops.gelu_tanh, ops.gelu_erf, ops.silu, ops.relu, ops.softmax])
def test_float32_stays_float32(fn):
    assert fn(RNG.standard_normal((3, 4)).astype(np.float32)).dtype == np.float32


def test_rotary_scores_depend_only_on_relative_position():
    rope = RopeSpec(theta=10000.0, rotary_dim=8)
    inv = inverse_frequencies(rope)
    q, k = RNG.standard_normal(8), RNG.standard_normal(8)
    cos, sin = cos_sin(np.arange(20)[None], inv, np.dtype(np.float64))
    qs = apply_rotary(np.broadcast_to(q, (1, 1, 20, 8)), cos, sin)[0, 0]
    ks = apply_rotary(np.broadcast_to(k, (1, 1, 20, 8)), cos, sin)[0, 0]
    assert qs[5] @ ks[2] == pytest.approx(qs[13] @ ks[10], rel=1e-5)
    np.testing.assert_allclose(np.linalg.norm(qs, axis=-1), np.linalg.norm(q), rtol=1e-6)  # a rotation


def test_partial_rotary_leaves_the_tail_untouched():
    inv = inverse_frequencies(RopeSpec(theta=10000.0, rotary_dim=4))
    cos, sin = cos_sin(np.arange(3)[None], inv, np.dtype(np.float32))
    x = RNG.standard_normal((1, 2, 3, 8)).astype(np.float32)
    y = apply_rotary(x, cos, sin)
    np.testing.assert_array_equal(y[..., 4:], x[..., 4:])
    np.testing.assert_array_equal(y[:, :, 0], x[:, :, 0])  # position 0: angle 0


def test_llama3_scaling_divides_long_wavelengths_only():
    base = inverse_frequencies(RopeSpec(theta=500000.0, rotary_dim=64))
    scaled = inverse_frequencies(RopeSpec(theta=500000.0, rotary_dim=64, scaling="llama3", factor=8.0,
                                          low_freq_factor=1.0, high_freq_factor=4.0, original_max_positions=8192))
    wavelen = 2 * np.pi / base
    assert np.array_equal(scaled[wavelen < 8192 / 4], base[wavelen < 8192 / 4])
    np.testing.assert_allclose(scaled[wavelen > 8192], base[wavelen > 8192] / 8, rtol=1e-6)


def test_causal_window_and_padding_masks():
    np.testing.assert_array_equal(causal_keep(2, 5, past=3), [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])  # bottom-right
    band = window_keep(5, 5, 2) & causal_keep(5, 5)
    np.testing.assert_array_equal(band, [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]])
    parts = build_keep(np.array([[0, 0, 1, 1], [1, 1, 1, 1]]), causal=True, window=None, q_len=4)
    np.testing.assert_array_equal(parts.keep[0, 0], [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]])
    np.testing.assert_array_equal(parts.keep[1, 0], np.tril(np.ones((4, 4))))


_cells = st.one_of(st.floats(-2.0**100, 2.0**100, width=32), st.sampled_from([np.nan, np.inf, -np.inf, -0.0]))


@settings(max_examples=300, deadline=None)
@given(st.data(), st.sampled_from([(2, 3, 4, 5), (1, 4, 3, 3), (3, 1, 2, 6)]), st.sampled_from([np.float32, np.float64]))
def test_mask_blocked_is_np_where_to_the_value(data, shape, dtype):
    """The additive 0/-inf bias gives np.where(keep, x, -inf) exactly (NaN where it is NaN, +0.0 for -0.0 in a kept
    cell), for keep-masks broadcast on the heads and the queries as tracer builds them, and full ones."""
    from tracer.engine.ops import mask_blocked

    x = np.array(data.draw(st.lists(_cells, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                 dtype=dtype).reshape(shape)
    keep_shape = data.draw(st.sampled_from([(shape[0], 1, shape[2], shape[3]), (shape[0], 1, 1, shape[3]), shape]))
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=int(np.prod(keep_shape)),
                                       max_size=int(np.prod(keep_shape))))).reshape(keep_shape)
    got, want = mask_blocked(x, keep), np.where(keep, x, -np.inf).astype(dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # NaN == NaN, -0.0 == 0.0, -inf == -inf


def _softmax_one_pass(x: np.ndarray) -> np.ndarray:
    """The softmax as one whole-tensor expression (what ops.softmax computes a piece of rows at a time)."""
    m = np.max(x, axis=-1, keepdims=True)
    m[~np.isfinite(m)] = 0.0
    e = np.exp(np.ascontiguousarray(x - m))
    s = np.sum(e, axis=-1, keepdims=True)
    s[s == 0] = 1.0
    return e / s


_FLOAT32_VALUES = st.one_of(st.floats(-60, 60, width=32), st.sampled_from([-np.inf, 0.0, -0.0, 1e-30, 88.0]))


@settings(max_examples=200, deadline=None)
@given(st.data(), st.sampled_from([(7, 11), (1, 5, 33), (2, 3, 9), (13, 1)]), st.integers(1, 400))
def test_softmax_in_pieces_of_rows_is_bit_identical_to_whole(data, shape, piece_bytes):
    """Large tensors are softmaxed a piece of rows at a time; any piece size gives the whole tensor's bits
    (fully masked rows included)."""
    n = int(np.prod(shape))
    x = np.array(data.draw(st.lists(_FLOAT32_VALUES, min_size=n, max_size=n)), np.float32).reshape(shape)
    old = ops._SOFTMAX_PIECE_BYTES
    ops._SOFTMAX_PIECE_BYTES = piece_bytes  # from one row a piece to the whole tensor in one
    try:
        got = ops.softmax(x)
    finally:
        ops._SOFTMAX_PIECE_BYTES = old
    np.testing.assert_array_equal(got, _softmax_one_pass(x))
    assert got.dtype == np.float32 and got.shape == x.shape


def test_softmax_in_pieces_on_logits_sized_input():
    """The logits' real case: more than a piece, a piece boundary mid-tensor, and a non-contiguous input."""
    x = (RNG.standard_normal((2, 150, 5003)) * 4).astype(np.float32)  # 6 MB: two pieces and a part
    assert x.nbytes > ops._SOFTMAX_PIECE_BYTES
    np.testing.assert_array_equal(ops.softmax(x), _softmax_one_pass(x))
    t = x.transpose(1, 0, 2)  # [150, 2, 5003], not C-contiguous
    np.testing.assert_array_equal(ops.softmax(t), _softmax_one_pass(t))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(width=32, allow_nan=True), st.floats(-12, 12, width=32)), min_size=1, max_size=64))
def test_gelu_tanh_in_place_is_the_expression_bit_for_bit(values):
    """gelu_tanh runs in two arrays in place; the bits are those of the one-line expression (inf and NaN too)."""
    x = np.array(values, np.float32)
    c = math.sqrt(2.0 / math.pi)
    with np.errstate(all="ignore"):
        want = 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * (x * x * x))))
        got = ops.gelu_tanh(x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("d_head", [4, 16, 64, 128, 96, 256])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scores_scaled_before_or_after_the_product_are_the_same_bits(d_head, dtype):
    """grouped_scores applies a power-of-two scale (d_head 4, 16, 64, 256) to q before the product; the scores
    are still exactly (q @ k^T) * scale, and other scales (96, 128) are applied after as before."""
    from tracer.engine.attention import exact_prescale, grouped_scores

    scale = d_head ** -0.5
    assert exact_prescale(scale) == (d_head in (4, 16, 64, 256))
    q = (RNG.standard_normal((2, 4, 9, d_head)) * 3).astype(dtype)
    k = (RNG.standard_normal((2, 2, 13, d_head)) * 3).astype(dtype)
    want = np.concatenate([q[:, :2] @ k[:, :1].swapaxes(-1, -2), q[:, 2:] @ k[:, 1:].swapaxes(-1, -2)], axis=1)
    want *= scale  # two query heads per kv head
    np.testing.assert_array_equal(grouped_scores(q, k, scale), want)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 48), st.data())
def test_norms_written_into_one_array_are_their_expressions_bit_for_bit(rows, cols, data):
    """layer_norm and rms_norm run row by row into one output array; the bits are those of the expressions."""
    floats = st.floats(-1e4, 1e4, width=32)
    x = np.array(data.draw(st.lists(floats, min_size=rows * cols, max_size=rows * cols)), np.float32).reshape(rows, cols)
    w, b = (np.array(data.draw(st.lists(st.floats(-3, 3, width=32), min_size=cols, max_size=cols)), np.float32)
            for _ in range(2))
    with np.errstate(all="ignore"):
        centred = x - x.mean(axis=-1, keepdims=True)
        ln = centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + 1e-5) * w + b
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)
        np.testing.assert_array_equal(ops.layer_norm(x, w, b, 1e-5), ln)
        np.testing.assert_array_equal(ops.rms_norm(x, w, 1e-6), y * w)
        np.testing.assert_array_equal(ops.rms_norm(x, w, 1e-6, offset=1.0), y * (w + 1.0))
