"""--compare: two conventions' effective masks on the same scores, and a one-line verdict.

The verdict names the known causes before counting cells: an exact inversion (polarity), a
causal corner shift (top-left vs bottom-right), a difference in the fill only (finite vs -inf,
so only fully masked rows differ), biases that differ by a per-row constant (same weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.errors import TracerError
from tracer.masks.result import MaskResult
from tracer.masks.warnings import describe_rows


@dataclass
class Comparison:
    a: MaskResult
    b: MaskResult
    kind: str  # identical | inverted | inverted-mask | causal-shift | fully-masked-rows | fill-only | outcome-only | bias-constant | bias | differs
    verdict: str
    diff: np.ndarray  # bool [B,H,Q,K]: keep differs

    @property
    def n_diff(self) -> int:
        return int(self.diff.sum())

    def to_json(self) -> dict:
        cells = [list(map(int, c)) for c in np.argwhere(self.diff)[:64]]
        return {"a": self.a.convention, "b": self.b.convention, "kind": self.kind, "verdict": self.verdict,
                "cells_differing": self.n_diff, "first_cells": cells, "diff": self.diff.astype(np.int8).tolist()}


def compare(a: MaskResult, b: MaskResult) -> Comparison:
    if a.score_shape != b.score_shape:
        raise TracerError(f"cannot compare masks on different scores {a.score_shape} and {b.score_shape}")
    diff = a.keep ^ b.keep
    if not diff.any():
        kind, verdict = same_pattern_verdict(a, b)
    else:
        kind, verdict = different_pattern_verdict(a, b, diff)
    return Comparison(a, b, kind, verdict, diff)


def same_pattern_verdict(a: MaskResult, b: MaskResult) -> tuple[str, str]:
    parts, kind = [], "identical"
    fill_same = (np.array_equal(a.soft, b.soft) and np.allclose(a.fill, b.fill, rtol=1e-6, atol=0)
                 and (a.fill_mode == b.fill_mode or not a.soft.any()))
    if not fill_same:
        parts.append(f"blocked cells differ only in the fill ({fill_text(a)} vs {fill_text(b)})")
        kind = "fill-only"
    rows = a.fully_masked()
    oa = sorted({a.row_outcome(*r) for r in rows})
    ob = sorted({b.row_outcome(*r) for r in rows})
    if oa != ob:
        parts.append(f"fully masked rows ({describe_rows(rows, a.score_shape)}) give {'/'.join(oa)} vs {'/'.join(ob)}")
        kind = kind if kind != "identical" else "outcome-only"
    ba = a.bias if a.bias is not None else np.zeros(a.score_shape)
    bb = b.bias if b.bias is not None else np.zeros(b.score_shape)
    delta = np.where(a.keep, ba - bb, 0.0)
    if not np.allclose(delta, 0.0, atol=1e-9):
        if per_row_constant(delta, a.keep):
            parts.append("the biases differ only by a per-row constant: softmax is shift-invariant, so the weights match")
            kind = "bias-constant" if kind == "identical" else kind
        else:
            parts.append(f"the biases differ (max |Δ| = {np.abs(delta).max():.4g})")
            kind = "bias" if kind == "identical" else kind
    if kind == "identical":
        return kind, f"identical: {a.convention} and {b.convention} keep, block and bias the same cells"
    return kind, "same keep pattern; " + "; ".join(parts)


def different_pattern_verdict(a: MaskResult, b: MaskResult, diff: np.ndarray) -> tuple[str, str]:
    n = int(diff.sum())
    if np.array_equal(a.keep, ~b.keep):
        return "inverted", (f"{b.convention} is the exact inversion of {a.convention} (all {n} cells flip): bool "
                            f"polarity - SDPA/JAX/HF/Keras/MLX read True = keep, MHA/nn.Transformer True = block")
    if a.user_keep is not None and b.user_keep is not None and np.array_equal(a.user_keep, ~b.user_keep):
        return "inverted-mask", (f"the mask itself is read with opposite polarity ({a.convention} keeps where "
                                 f"{b.convention} blocks); {n} cells differ after the generated parts")
    shift = causal_shift(a, b, diff)
    if shift:
        return "causal-shift", shift
    fm_a = ~a.keep.any(-1)
    fm_b = ~b.keep.any(-1)
    rows_diff = diff.any(-1)
    if (rows_diff <= (fm_a | fm_b)).all():
        rows = [tuple(map(int, r)) for r in np.argwhere(rows_diff)]
        return "fully-masked-rows", (f"differs only in rows that one side blocks entirely "
                                     f"({describe_rows(rows, a.score_shape)}): {n} cells")
    cells = ", ".join("(" + ",".join(map(str, c)) + ")" for c in np.argwhere(diff)[:3])
    more = a.keep[diff].sum()
    return "differs", (f"differs at {n} cell(s) (b,h,q,k): {cells}{' ...' if n > 3 else ''}; {a.convention} keeps "
                       f"{int(more)} of them, {b.convention} keeps {n - int(more)}")


def causal_shift(a: MaskResult, b: MaskResult, diff: np.ndarray) -> str | None:
    """Every differing cell lies between the two causal diagonals: a top-left vs bottom-right shift."""
    if a.causal_offset is None or b.causal_offset is None or a.causal_offset == b.causal_offset:
        return None
    lo, hi = sorted((a.causal_offset, b.causal_offset))
    idx = np.argwhere(diff)
    d = idx[:, 3] - idx[:, 2]  # k - q
    if not ((d > lo) & (d <= hi)).all():
        return None
    B, H, Q, K = a.score_shape
    names = {0: "top-left", K - Q: "bottom-right"}
    return (f"differs only by the causal corner: {a.convention} keeps k <= q + {a.causal_offset} "
            f"({names.get(a.causal_offset, 'offset')}), {b.convention} k <= q + {b.causal_offset} "
            f"({names.get(b.causal_offset, 'offset')}): a shift of {hi - lo}{' = K - Q' if hi - lo == K - Q else ''}, "
            f"{int(diff.sum())} cells")


def per_row_constant(delta: np.ndarray, keep: np.ndarray) -> bool:
    """Is delta constant over the kept keys of every row?"""
    big = np.where(keep, delta, np.nan)
    with np.errstate(invalid="ignore"):
        spread = np.nanmax(big, axis=-1) - np.nanmin(big, axis=-1)
    spread = np.where(keep.any(-1), spread, 0.0)
    return bool(np.allclose(spread, 0.0, atol=1e-9))


def fill_text(r: MaskResult) -> str:
    if not r.soft.any():
        return f"{r.convention}: -inf"
    fills = np.unique(r.fill[r.soft])
    how = "replaces" if r.fill_mode == "replace" else "added"
    return f"{r.convention}: finite {', '.join(f'{f:.4g}' for f in fills[:2])} ({how})"
