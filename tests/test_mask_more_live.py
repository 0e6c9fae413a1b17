"""Live checks of the mlx, Keras 3 (JAX backend) and Flax conventions against the libraries themselves.

Pinned in the `live` extra: mlx[cpu] 0.32.4 (mx.fast.scaled_dot_product_attention runs on Linux CPU),
keras 3.15.1, flax 0.12.8. With V = I the attention output is the weight matrix; Keras and Flax
return the weights directly. Cells the lab calls blocked must get zero weight, kept cells nonzero
weight, and fully masked rows the outcome the lab names (zeros, uniform).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.live
os.environ.setdefault("KERAS_BACKEND", "jax")

from mask_check import check_pattern  # noqa: E402
from tracer.errors import TracerError  # noqa: E402
from tracer.masks.conventions import canonical_mask  # noqa: E402

RNG = np.random.default_rng(11)


def random_keep(shape, p=0.6) -> np.ndarray:
    keep = RNG.random(shape) < p
    keep[..., 0] |= RNG.random(shape[:-1]) < 0.5  # most rows keep something; some stay fully masked
    return keep


# ---------- mlx ----------


def mlx_weights(B, H, Q, K, mask) -> np.ndarray:
    mx = pytest.importorskip("mlx.core")
    D = max(K, 4)
    q = mx.array(RNG.standard_normal((B, H, Q, D)).astype(np.float32))
    k = mx.array(RNG.standard_normal((B, H, K, D)).astype(np.float32))
    v = mx.array(np.broadcast_to(np.eye(K, D, dtype=np.float32), (B, H, K, D)).copy())
    m = mask if isinstance(mask, str) or mask is None else mx.array(mask)
    out = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / np.sqrt(D), mask=m)
    return np.array(out)[..., :K]


@pytest.mark.parametrize("mask_shape", [(3, 5), (2, 1, 3, 5), (2, 4, 3, 5), (1, 4, 1, 5)])
def test_mlx_bool_masks_land_where_mlx_puts_them(mask_shape):
    keep = random_keep(mask_shape)
    w = mlx_weights(2, 4, 3, 5, keep)
    check_pattern(canonical_mask("mlx", keep, (2, 4, 3, 5)), w)


@pytest.mark.parametrize("Q,K", [(3, 3), (2, 5), (1, 4)])
def test_mlx_causal_keyword_is_bottom_right(Q, K):
    w = mlx_weights(1, 2, Q, K, "causal")
    r = canonical_mask("mlx", "causal", (1, 2, Q, K))
    check_pattern(r, w)
    assert r.keep[0, 0, 0].sum() == K - Q + 1  # the first query sees the past K - Q keys and itself


def test_mlx_additive_float_mask():
    bias = np.where(random_keep((2, 1, 3, 5)), 0.0, -np.inf).astype(np.float32)
    w = mlx_weights(2, 2, 3, 5, bias)
    check_pattern(canonical_mask("mlx", bias, (2, 2, 3, 5)), w)


# ---------- Keras 3 on JAX ----------


def keras_weights(B, H, Q, K, mask=None, causal=False) -> np.ndarray:
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "jax":
        pytest.skip("Keras runs on another backend here")
    mha = keras.layers.MultiHeadAttention(num_heads=H, key_dim=4)
    x = RNG.standard_normal((B, Q, 8)).astype(np.float32)
    y = RNG.standard_normal((B, K, 8)).astype(np.float32)
    _, w = mha(x, y, attention_mask=mask, use_causal_mask=causal, return_attention_scores=True)
    return np.asarray(w)  # [B, H, Q, K]


@pytest.mark.parametrize("mask_shape", [(2, 3, 5), (1, 3, 5), (2, 1, 5)])
def test_keras_masks_get_their_head_axis_inserted(mask_shape):
    keep = random_keep(mask_shape)
    w = keras_weights(2, 2, 3, 5, keep)
    check_pattern(canonical_mask("keras-mha", keep, (2, 2, 3, 5)), w)


def test_keras_use_causal_mask_is_top_left_and_ands_with_the_mask():
    keep = random_keep((2, 4, 4), p=0.8)
    w = keras_weights(2, 2, 4, 4, keep, causal=True)
    r = canonical_mask("keras-mha", keep, (2, 2, 4, 4), is_causal=True)
    check_pattern(r, w)
    assert not r.keep[0, 0, 0, 1:].any()


def test_keras_uses_a_4d_mask_as_it_is():
    """Keras expands the mask 4 - ndim times at axis -3, so a 4-D mask lands without an inserted axis."""
    keep = random_keep((2, 1, 3, 5))
    w = keras_weights(2, 2, 3, 5, keep)
    check_pattern(canonical_mask("keras-mha", keep, (2, 2, 3, 5)), w)


def test_keras_rejects_a_1d_mask_and_so_does_the_lab():
    with pytest.raises(TracerError):
        canonical_mask("keras-mha", np.ones((5,), bool), (2, 2, 3, 5))
    with pytest.raises(Exception):
        keras_weights(2, 2, 3, 5, np.ones((5,), bool))


# ---------- Flax ----------


def flax_weights(B, H, Q, K, mask) -> np.ndarray:
    nn = pytest.importorskip("flax.linen")
    import jax.numpy as jnp

    q = jnp.asarray(RNG.standard_normal((B, Q, H, 4)), jnp.float32)
    k = jnp.asarray(RNG.standard_normal((B, K, H, 4)), jnp.float32)
    return np.asarray(nn.dot_product_attention_weights(q, k, mask=jnp.asarray(mask)))  # [B, H, Q, K]


@pytest.mark.parametrize("mask_shape", [(2, 4, 3, 5), (1, 1, 3, 5), (2, 1, 1, 5)])
def test_flax_masks_replace_with_finfo_min_and_give_uniform_empty_rows(mask_shape):
    keep = random_keep(mask_shape)
    w = flax_weights(2, 4, 3, 5, keep)
    r = canonical_mask("flax-mask", keep, (2, 4, 3, 5))
    check_pattern(r, w)
    for b, h, q in r.fully_masked():
        assert r.row_outcome(b, h, q) == "uniform"


def test_flax_reads_an_additive_mask_as_truthy():
    additive = np.array([[0.0, -np.inf, -np.inf]], np.float32)[None, None]  # meant: keep key 0 only
    w = flax_weights(1, 1, 1, 3, additive)
    r = canonical_mask("flax-mask", additive, (1, 1, 1, 3))
    check_pattern(r, w)
    assert r.keep[0, 0, 0].tolist() == [False, True, True]  # the opposite of what was meant
    assert "ML001" in r.codes()
