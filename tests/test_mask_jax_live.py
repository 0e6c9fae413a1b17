"""Live checks of the JAX conventions against jax.nn.dot_product_attention (jax 0.10).

V is the identity, so the attention output is the weight matrix: cells tracer calls blocked must
get zero weight, kept cells nonzero weight, fully masked rows the uniform row JAX documents.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytestmark = pytest.mark.live

import jax.numpy as jnp  # noqa: E402

from mask_check import check_pattern  # noqa: E402
from tracer.errors import TracerError  # noqa: E402
from tracer.masks.conventions import canonical_mask  # noqa: E402

RNG = np.random.default_rng(7)


def jax_weights(B, H, Q, K, **kwargs) -> np.ndarray:
    """[B,H,Q,K] weights from jax.nn.dot_product_attention (layouts BTNH) with V = I."""
    D = max(K, 4)
    q = jnp.asarray(RNG.standard_normal((B, Q, H, D)), jnp.float32)
    k = jnp.asarray(RNG.standard_normal((B, K, H, D)), jnp.float32)
    v = jnp.broadcast_to(jnp.eye(K, D, dtype=jnp.float32)[None, :, None, :], (B, K, H, D))
    out = jax.nn.dot_product_attention(q, k, v, implementation="xla", **kwargs)  # [B, Q, H, D]
    return np.asarray(out)[..., :K].transpose(0, 2, 1, 3)


@pytest.mark.parametrize("mask_shape", [(3, 5), (2, 1, 3, 5), (2, 4, 3, 5), (1, 4, 1, 5), (4, 3, 5)])
def test_random_bool_masks_land_where_jax_puts_them(mask_shape):
    B, H, Q, K = 2, 4, 3, 5
    for _ in range(5):
        m = RNG.random(mask_shape) < 0.6
        result = canonical_mask("jax-bool", m, (B, H, Q, K))
        check_pattern(result, jax_weights(B, H, Q, K, mask=jnp.asarray(m)))


@pytest.mark.parametrize("Q,K", [(2, 5), (5, 5), (5, 2)])
def test_is_causal_is_top_left(Q, K):
    result = canonical_mask("jax-bool", None, (1, 2, Q, K), is_causal=True)
    np.testing.assert_array_equal(result.keep[0, 0], np.tril(np.ones((Q, K), bool)))
    check_pattern(result, jax_weights(1, 2, Q, K, is_causal=True))


@pytest.mark.parametrize("window", [(1, 0), (2, 1), (0, 2)])
def test_local_window_size(window):
    result = canonical_mask("jax-bool", None, (1, 2, 6, 6), window_lr=window)
    check_pattern(result, jax_weights(1, 2, 6, 6, local_window_size=window))


def test_float_masks_are_rejected_like_jax():
    with pytest.raises(Exception):
        jax_weights(1, 1, 2, 2, mask=jnp.ones((2, 2), jnp.float32))
    with pytest.raises(TracerError, match="bool"):
        canonical_mask("jax-bool", np.ones((2, 2), np.float32), (1, 1, 2, 2))
