"""Decoder parity against transformers' eager forward, shared by test_parity, test_parity_live and the family
tests: compare a trace with a reference step by step over real (unpadded) positions, run tracer like one."""

from __future__ import annotations

import numpy as np

from tracer.steps import describe
from tracer.trace import Trace

ATOL32 = 1e-5
ATOL64 = 1e-10
MUST_COMPARE = ("embed.out", "blocks.{i}.resid_post", "final_norm.out", "blocks.{i}.attn.weights", "logits",
                "blocks.{i}.attn.q", "blocks.{i}.attn.k", "blocks.{i}.attn.v", "blocks.{i}.mlp.out")


def real_rows(name: str, arr: np.ndarray, mask: np.ndarray) -> np.ndarray:
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
    errors, scales = {}, {}
    for step in ref.steps:
        if step.array is None or step.name.startswith("input.") or step.name not in ours:
            continue
        a, b = ours[step.name], step.array
        assert a.shape == b.shape, f"{step.name}: {a.shape} vs {b.shape}"
        diff = np.abs(real_rows(step.name, a.astype(np.float64), mask) - real_rows(step.name, b.astype(np.float64), mask))
        errors[step.name] = float(diff.max())
        scales[step.name] = step_scale(b)
    bad = {k: v for k, v in errors.items() if not v <= atol * scales[k]}
    assert not bad, f"steps beyond {atol} x max(1, max|ref|): {bad}"
    return errors


def step_scale(ref: np.ndarray) -> float:
    """max(1, max |finite value|): float32 rounding grows with the magnitude, so a tolerance of 1e-5 holds for
    values up to 1 and 1e-5 of the step's largest value beyond (seen: 1.3e-5 on a step of max 6.2, 27 ulps
    after two blocks, on an AMD EPYC whose BLAS sums in another order than the machine that built the
    references)."""
    finite = np.abs(ref[np.isfinite(ref)]) if ref.dtype.kind == "f" else np.abs(ref)
    return max(1.0, float(finite.max())) if finite.size else 1.0


def check_coverage(errors: dict, n_layers: int, final_norm: bool = True) -> None:
    for template in MUST_COMPARE:
        if template == "final_norm.out" and not final_norm:  # post-norm without a final norm (opt-350m)
            continue
        names = [template.format(i=i) for i in range(n_layers)] if "{i}" in template else [template]
        missing = [n for n in names if n not in errors]
        assert not missing, f"reference lacks {missing}"


def run_like(model, ref: Trace):
    ids, mask = ref["input.ids"], ref["input.mask"] if "input.mask" in ref else np.ones_like(ref["input.ids"])
    rows = [[int(t) for t, m in zip(r, mr) if m] for r, mr in zip(ids, mask)]
    left = bool(mask[:, 0].min() == 0)
    return model.run(ids=rows, pad_side="left" if left else "right")
