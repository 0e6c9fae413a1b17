"""Live checks of the mask lab against the real libraries (torch 2.13, transformers 5.24).

For random masks and shapes: the cells tracer calls blocked get exactly zero weight from torch,
the kept ones get nonzero weight, fully masked rows come out as tracer says (zeros / NaN /
uniform), and the rejection texts are torch's own. SDPA returns no weights, so V is the identity:
the output then *is* the weight matrix.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.live

import torch.nn.attention.bias  # noqa: E402  (CausalBias lives in a submodule)

from mask_check import check_pattern  # noqa: E402
from tracer.errors import TracerError  # noqa: E402
from tracer.masks.conventions import canonical_mask  # noqa: E402
from tracer.masks.generated import t5_bucket  # noqa: E402
from tracer.masks.outcomes import expected_weights  # noqa: E402

torch.set_num_threads(1)
F = torch.nn.functional


def sdpa_weights(q, k, mask=None, is_causal=False):
    """[B,H,Q,K] attention weights from torch SDPA, using V = I padded to the head dim (K <= D).

    Keeping V's head dim equal to q's lets torch pick its default CPU kernel, as real models do.
    """
    B, H, Q, D = q.shape
    K = k.shape[2]
    assert K <= D
    v = torch.eye(K, D, dtype=q.dtype).expand(B, H, K, D)
    with torch.no_grad():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)[..., :K]


def scores_of(q, k):
    return (q.double() @ k.double().transpose(-1, -2) / np.sqrt(q.shape[-1])).numpy()


def mask_shapes(B, H, Q, K):
    return [(Q, K), (B, 1, Q, K), (1, H, 1, K), (B, H, Q, K), (H, Q, K), (B, 1, 1, K), (1, Q, K), (H, 1, K)]


@pytest.mark.parametrize("seed", range(6))
def test_sdpa_bool_random(seed):
    rng = np.random.default_rng(seed)
    B, H, Q, K = (int(x) for x in np.concatenate([rng.integers(1, 4, size=2), rng.integers(1, 6, size=2)]))
    for shape in mask_shapes(B, H, Q, K):
        m = rng.random(shape) < 0.6
        q = torch.from_numpy(rng.normal(size=(B, H, Q, 8)).astype(np.float32))
        k = torch.from_numpy(rng.normal(size=(B, H, K, 8)).astype(np.float32))
        w = sdpa_weights(q, k, torch.from_numpy(m)).numpy()
        r = canonical_mask("torch-sdpa-bool", m, (B, H, Q, K))
        check_pattern(r, w)
        np.testing.assert_allclose(w, expected_weights(r, scores_of(q, k)), atol=2e-6)


@pytest.mark.parametrize("seed", range(4))
def test_sdpa_float_random_with_finite_fills(seed):
    rng = np.random.default_rng(100 + seed)
    B, H, Q, K = 2, 2, 3, 5
    choices = np.array([0.0, -np.inf, float(np.finfo(np.float32).min), 0.5, -2.0], dtype=np.float32)
    m = rng.choice(choices, size=(B, 1, Q, K)).astype(np.float32)
    m[0, 0, 0] = float(np.finfo(np.float32).min)  # a row of only finfo.min -> uniform
    m[1, 0, 1] = -np.inf  # a row of only -inf -> zeros
    q = torch.from_numpy(rng.normal(size=(B, H, Q, 8)).astype(np.float32))
    k = torch.from_numpy(rng.normal(size=(B, H, K, 8)).astype(np.float32))
    w = sdpa_weights(q, k, torch.from_numpy(m)).numpy()
    r = canonical_mask("torch-sdpa-float", m, (B, H, Q, K))
    assert r.row_outcome(0, 0, 0) == "uniform" and r.row_outcome(1, 0, 1) == "zeros"
    assert np.allclose(w[0, :, 0], 1 / K, atol=1e-6) and np.all(w[1, :, 1] == 0)
    np.testing.assert_allclose(w, expected_weights(r, scores_of(q, k)), atol=2e-6)


@pytest.mark.parametrize("Q, K", [(2, 5), (5, 2), (4, 4)])
def test_sdpa_is_causal_is_top_left(Q, K):
    rng = np.random.default_rng(Q * 10 + K)
    q = torch.from_numpy(rng.normal(size=(1, 2, Q, 8)).astype(np.float32))
    k = torch.from_numpy(rng.normal(size=(1, 2, K, 8)).astype(np.float32))
    w = sdpa_weights(q, k, is_causal=True).numpy()
    check_pattern(canonical_mask("torch-sdpa-bool", None, (1, 2, Q, K), is_causal=True), w)
    lower_right = torch.nn.attention.bias.causal_lower_right(Q, K)
    with torch.no_grad():
        materialized = lower_right._materialize().numpy()
    r = canonical_mask("torch-causal-lower-right", None, (1, 1, Q, K))
    assert np.array_equal(r.keep[0, 0], materialized)


def test_sdpa_is_causal_plus_mask_ands_on_the_default_cpu_path():
    rng = np.random.default_rng(7)
    q = torch.from_numpy(rng.normal(size=(1, 1, 4, 8)).astype(np.float32))
    k = torch.from_numpy(rng.normal(size=(1, 1, 4, 8)).astype(np.float32))
    m = np.array([[1, 1, 0, 1]] * 4, bool)
    w = sdpa_weights(q, k, torch.from_numpy(m), is_causal=True).numpy()
    r = canonical_mask("torch-sdpa-bool", m, (1, 1, 4, 4), is_causal=True)
    assert "ML009" in r.codes()
    check_pattern(r, w)


@pytest.mark.parametrize("mask, shape", [
    (np.ones((3, 3), np.int64), (2, 2, 3, 3)),
    (np.ones((3, 3), np.uint8), (2, 2, 3, 3)),
    (np.zeros((3, 3), np.float64), (2, 2, 3, 3)),
    (np.ones(3, bool), (2, 2, 3, 3)),
    (np.ones((2, 3), bool), (2, 2, 3, 3)),
    (np.ones((3, 2, 3, 3), bool), (2, 2, 3, 3)),
])
def test_sdpa_rejection_texts_are_torchs(mask, shape):
    B, H, Q, K = shape
    q = torch.zeros(B, H, Q, 4)
    k = torch.zeros(B, H, K, 4)
    with pytest.raises(Exception) as real:
        F.scaled_dot_product_attention(q, k, k, attn_mask=torch.from_numpy(mask))
    with pytest.raises(TracerError) as ours:
        canonical_mask("torch-sdpa-bool", mask, shape)
    assert str(real.value) in ours.value.message


def mha_weights(N, H, L, S, attn_mask=None, kpm=None, seed=0):
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(4 * H, H, batch_first=True)
    x = torch.randn(N, L, 4 * H)
    mem = torch.randn(N, S, 4 * H)
    with torch.no_grad():
        _, w = mha(x, mem, mem, attn_mask=attn_mask, key_padding_mask=kpm, need_weights=True,
                   average_attn_weights=False)
    return w.numpy()


@pytest.mark.parametrize("seed", range(4))
def test_mha_bool_2d_3d_and_key_padding_random(seed):
    rng = np.random.default_rng(200 + seed)
    N, H, L, S = 2, 3, 3, 4
    m2 = rng.random((L, S)) < 0.3
    m3 = rng.random((N * H, L, S)) < 0.3
    kpm = rng.random((N, S)) < 0.3
    for attn, pad in ((m2, None), (m3, None), (None, kpm), (m3, kpm)):
        w = mha_weights(N, H, L, S, None if attn is None else torch.from_numpy(attn),
                        None if pad is None else torch.from_numpy(pad), seed)
        if attn is None:
            r = canonical_mask("torch-mha-key-padding", pad, (N, H, L, S))
        else:
            r = canonical_mask("torch-mha-bool", attn, (N, H, L, S), kpm=pad)
        check_pattern(r, w)


def test_mha_rejection_texts_are_torchs():
    N, H, L = 2, 2, 3
    mha = torch.nn.MultiheadAttention(4, H, batch_first=True)
    x = torch.randn(N, L, 4)
    cases = [(dict(attn_mask=torch.ones(N, L, L, dtype=torch.bool)), ("torch-mha-bool", np.ones((N, L, L), bool), {})),
             (dict(attn_mask=torch.ones(L, L, dtype=torch.uint8)), ("torch-mha-bool", np.ones((L, L), np.uint8), {})),
             (dict(attn_mask=torch.ones(N, L, dtype=torch.bool)), ("torch-mha-bool", np.ones((N, L), bool), {})),
             (dict(key_padding_mask=torch.ones(L + 1, L, dtype=torch.bool)),
              ("torch-mha-key-padding", np.ones((L + 1, L), bool), {}))]
    for kwargs, (name, arr, extra) in cases:
        with pytest.raises(Exception) as real:
            mha(x, x, x, **kwargs)
        with pytest.raises(TracerError) as ours:
            canonical_mask(name, arr, (N, H, L, L), **extra)
        assert str(real.value) in ours.value.message, (str(real.value), ours.value.message)


def test_square_subsequent_mask_matches_torch():
    real = torch.nn.Transformer.generate_square_subsequent_mask(5).numpy()
    r = canonical_mask("torch-square-subsequent", None, (1, 1, 5, 5))
    assert np.array_equal(r.keep[0, 0], real == 0)


# ---------- transformers ----------


@pytest.mark.parametrize("mask2d, q_len, past, window", [
    ([[0, 0, 1, 1], [1, 1, 1, 1]], 4, 0, None),
    ([[0, 0, 1, 1, 1]], 1, 4, None),
    ([[1, 1, 1, 1, 1]], 2, 3, None),
    ([[0, 1, 1, 1, 1, 1]], 6, 0, 2),
    ([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]], 3, 4, 3),
])
def test_hf_2d_matches_masking_utils(mask2d, q_len, past, window):
    mu = pytest.importorskip("transformers.masking_utils")
    m = torch.tensor(mask2d, dtype=torch.bool)
    B, kv = m.shape
    fn = mu.causal_mask_function if window is None else mu.sliding_window_causal_mask_function(window)
    real = mu.sdpa_mask(batch_size=B, q_length=q_len, kv_length=kv, q_offset=past, kv_offset=0, mask_function=fn,
                        attention_mask=m, allow_is_causal_skip=False).numpy()
    r = canonical_mask("hf-2d", np.array(mask2d), (B, 1, q_len, kv), past=past, window=window)
    assert np.array_equal(r.keep, real)
    eager = mu.eager_mask(batch_size=B, q_length=q_len, kv_length=kv, q_offset=past, kv_offset=0, mask_function=fn,
                          attention_mask=m, dtype=torch.float32).numpy()
    re = canonical_mask("hf-2d", np.array(mask2d), (B, 1, q_len, kv), past=past, window=window, hf_impl="eager")
    assert np.array_equal(re.additive(), np.where(re.keep, 0.0, eager.astype(np.float64)))
    assert np.array_equal(re.soft, eager != 0)


def test_t5_buckets_match_transformers():
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    rel = torch.arange(-300, 300).reshape(20, 30)
    for bidirectional in (True, False):
        for nb, md in ((32, 128), (16, 64)):
            real = t5.T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=nb,
                                                            max_distance=md).numpy()
            assert np.array_equal(t5_bucket(rel.numpy(), bidirectional, nb, md), real)


def test_eager_attention_gives_uniform_fully_masked_rows():
    """transformers' eager path adds finfo.min and softmaxes: pad query rows come out uniform, as tracer says."""
    mu = pytest.importorskip("transformers.masking_utils")
    mask = torch.tensor([[0, 0, 1, 1]], dtype=torch.bool)
    eager = mu.eager_mask(batch_size=1, q_length=4, kv_length=4, attention_mask=mask, dtype=torch.float32)
    scores = torch.randn(1, 2, 4, 4)
    w = torch.softmax(scores + eager, dim=-1, dtype=torch.float32).numpy()
    r = canonical_mask("hf-2d", np.array([[0, 0, 1, 1]]), (1, 2, 4, 4), hf_impl="eager")
    check_pattern(r, w)
    np.testing.assert_allclose(w, expected_weights(r, scores.double().numpy()), atol=1e-6)


def test_sdpa_math_backend_raises_for_is_causal_plus_mask_as_ml009_says():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.zeros(1, 1, 3, 8)
    with sdpa_kernel(SDPBackend.MATH), pytest.raises(RuntimeError) as real:
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(3, 3, dtype=torch.bool), is_causal=True)
    r = canonical_mask("torch-sdpa-bool", np.ones((3, 3), bool), (1, 1, 3, 3), is_causal=True)
    ml009 = next(w.message for w in r.warnings if w.code == "ML009")
    assert "Explicit attn_mask should not be set when is_causal=True" in str(real.value)
    assert "Explicit attn_mask should not be set when is_causal=True" in ml009
