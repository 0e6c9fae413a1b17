"""The mask lab's dtype rules, checked against torch 2.13 itself: every (query dtype, mask dtype) pair that torch
accepts, the lab accepts, and every pair torch rejects, the lab rejects with torch's own words."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.live

from tracer.errors import TracerError  # noqa: E402
from tracer.masks.conventions import canonical_mask  # noqa: E402

torch.set_num_threads(1)
F = torch.nn.functional
SCORE_DTYPES = ("float16", "bfloat16", "float32", "float64")
MASK_DTYPES = ("float16", "bfloat16", "float32", "float64", "bool", "int64", "uint8")


def torch_dtype(name: str):
    return getattr(torch, name)


def literal(mask_dtype: str) -> str:
    return ("[[1,1],[1,1]]" if mask_dtype in ("bool", "int64", "uint8") else "[[0,0],[0,0]]") + "@" + mask_dtype


def torch_outcome(call) -> str | None:
    try:
        with torch.no_grad():
            call()
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError or AssertionError here
        return str(exc)
    return None


def lab_outcome(convention: str, mask_dtype: str, score_dtype: str, **options) -> str | None:
    try:
        canonical_mask(convention, literal(mask_dtype), (1, 1, 2, 2), score_dtype=score_dtype, **options)
    except TracerError as exc:
        return exc.message
    return None


@pytest.mark.parametrize("score_dtype", SCORE_DTYPES)
@pytest.mark.parametrize("mask_dtype", MASK_DTYPES)
def test_sdpa_accepts_what_torch_accepts(score_dtype, mask_dtype):
    q = torch.randn(1, 1, 2, 4, dtype=torch_dtype(score_dtype))
    m = torch.ones(2, 2, dtype=torch.bool) if mask_dtype == "bool" else torch.zeros(2, 2, dtype=torch_dtype(mask_dtype))
    real = torch_outcome(lambda: F.scaled_dot_product_attention(q, q, q, attn_mask=m))
    ours = lab_outcome("torch-sdpa-float", mask_dtype, score_dtype)
    assert (real is None) == (ours is None), (real, ours)
    if real is not None:
        assert real.split(" instead")[0].split(" and ")[0] in ours


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("score_dtype", ("float16", "float32", "float64"))
@pytest.mark.parametrize("mask_dtype", MASK_DTYPES)
def test_mha_accepts_what_torch_accepts(score_dtype, mask_dtype, need_weights):
    mha = torch.nn.MultiheadAttention(4, 1, batch_first=True).to(torch_dtype(score_dtype))
    x = torch.randn(1, 2, 4, dtype=torch_dtype(score_dtype))
    m = torch.zeros(2, 2, dtype=torch_dtype(mask_dtype))
    real = torch_outcome(lambda: mha(x, x, x, attn_mask=m, need_weights=need_weights))
    ours = lab_outcome("torch-mha-float", mask_dtype, score_dtype, need_weights=need_weights)
    assert (real is None) == (ours is None), (real, ours)
    if real is not None:
        assert real[:40] in ours, (real, ours)


def test_float32_fill_with_float16_queries_stays_finite_as_the_lab_says():
    """-70000 overflows float16, but torch adds a float32 mask in float32: a fully masked row is the unmasked
    softmax (shift invariance), not zeros; the lab predicts exactly that."""
    torch.manual_seed(0)
    q = torch.randn(1, 1, 2, 2, dtype=torch.float16)
    m = torch.tensor([[-70000.0, -70000.0], [0.0, 0.0]])
    v = torch.eye(2, dtype=torch.float16)[None, None]
    with torch.no_grad():
        w = F.scaled_dot_product_attention(q, q, v, attn_mask=m)[0, 0].float().numpy()
        unmasked = torch.softmax(q.float() @ q.float().transpose(-1, -2) / np.sqrt(2), -1)[0, 0].numpy()
    r = canonical_mask("torch-sdpa-float", "[[-70000,-70000],[0,0]]@float32", (1, 1, 2, 2), score_dtype="float16")
    assert r.row_outcome(0, 0, 0) == "unmasked"
    assert np.allclose(w[0], unmasked[0], atol=2e-3)
    assert not np.allclose(w[0], 0.0)
