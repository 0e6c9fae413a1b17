"""--check-weights TRACE:STEP: do recorded attention weights obey the mask?

Checks on a [B,H,Q,K] weight tensor (from a trace step, a .npy or a .npz:key):
  blocked cells carry no weight (P1/P2), rows sum to 1 (P3: masked after softmax without
  renormalising), no NaN rows (P4), what fully masked rows hold (NaN / zeros / uniform), and,
  when the sibling `...attn.scores` step is in the trace, rows that equal the UNMASKED softmax
  (P5: mask not applied, or a fill too small) and the distance to what the convention gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracer.errors import TracerError
from tracer.masks.literal import load_npy, load_npz_key
from tracer.masks.outcomes import expected_weights, softmax
from tracer.masks.result import MaskResult, fmt_shape


@dataclass
class Check:
    name: str
    status: str  # ok | fail | info
    detail: str

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass
class WeightsCheck:
    source: str
    scores_source: str | None
    checks: list[Check] = field(default_factory=list)

    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.checks)

    def to_json(self) -> dict:
        return {"source": self.source, "scores": self.scores_source, "failed": self.failed(),
                "checks": [c.to_json() for c in self.checks]}


def load_weights(spec: str) -> tuple[np.ndarray, np.ndarray | None, str, str | None]:
    """TRACE:STEP, FILE.npy or FILE.npz:KEY -> (weights, scores or None, label, scores label)."""
    if spec.endswith(".npy"):
        return load_npy(Path(spec)), None, spec, None
    if ".npz:" in spec or spec.endswith(".npz"):
        path, _, key = spec.partition(".npz:")
        return load_npz_key(Path(path + ".npz" if key else spec), key or None), None, spec, None
    path, sep, step = spec.rpartition(":")
    if not sep or not path or not step:
        raise TracerError(f"--check-weights {spec!r}: expected TRACE:STEP (e.g. t.safetensors:blocks.0.attn.weights), "
                          f"FILE.npy or FILE.npz:KEY")
    from tracer.trace import Trace

    trace = Trace.load(path)
    if step not in trace:
        options = [n for n in trace.names() if n.endswith("attn.weights")][:6]
        raise TracerError(f"{path} has no step {step!r}", hint="attention weight steps: " + (", ".join(options) or "none"))
    try:
        weights = trace[step]
    except KeyError as exc:
        raise TracerError(str(exc.args[0])) from None
    scores, scores_label = None, None
    if step.endswith("weights"):
        sibling = step[: -len("weights")] + "scores"
        if sibling in trace and trace.step(sibling).kept:
            scores, scores_label = trace[sibling], f"{path}:{sibling}"
    return weights, scores, f"{path}:{step}", scores_label


def tolerance(weights: np.ndarray) -> float:
    return 2e-3 if weights.dtype.itemsize <= 2 else 1e-4


def check_weights(result: MaskResult, weights: np.ndarray, scores: np.ndarray | None = None,
                  source: str = "weights", scores_source: str | None = None) -> WeightsCheck:
    if tuple(weights.shape) != result.score_shape:
        raise TracerError(f"the weights are {fmt_shape(weights.shape)} but the scores are {fmt_shape(result.score_shape)}",
                          hint="omit --scores to take the shape from the weights")
    tol = tolerance(weights)
    w = np.asarray(weights).astype(np.float64)
    out = WeightsCheck(source, scores_source)
    live = result.keep.any(-1)  # rows with at least one kept key
    nan_row = np.isnan(w).any(-1)
    out.checks.append(blocked_weight_check(result, w, live & ~nan_row))
    out.checks.append(row_sum_check(result, w, live & ~nan_row, tol))
    out.checks.append(nan_check(result, nan_row, live))
    out.checks.append(fully_masked_check(result, w, live))
    if scores is not None:
        if tuple(scores.shape) != result.score_shape:
            raise TracerError(f"the scores are {fmt_shape(scores.shape)}, the weights {fmt_shape(result.score_shape)}")
        out.checks.extend(score_checks(result, w, np.asarray(scores).astype(np.float64), live, tol))
    return out


def blocked_weight_check(result: MaskResult, w: np.ndarray, rows: np.ndarray) -> Check:
    hard = result.hard & rows[..., None]
    soft = result.soft & rows[..., None]
    worst_hard = float(np.abs(w[hard]).max()) if hard.any() else 0.0
    worst_soft = float(np.abs(w[soft]).max()) if soft.any() else 0.0
    if worst_hard > 1e-6:
        cell = tuple(int(i) for i in np.argwhere(hard & (np.abs(w) == worst_hard))[0])
        return Check("blocked cells", "fail", f"weight {worst_hard:.4g} on a hard-blocked cell (b,h,q,k)={cell}: the mask "
                     f"was not applied as {result.convention} applies it (inverted or shifted? P1/P6)")
    if worst_soft > 1e-6:
        return Check("blocked cells", "fail", f"weight {worst_soft:.4g} on a soft-blocked cell: the finite fill leaks (P5)")
    n = int(hard.sum() + soft.sum())
    return Check("blocked cells", "ok", f"max weight on {n} blocked cell(s) of partly kept rows: {max(worst_hard, worst_soft):.3g}")


def row_sum_check(result: MaskResult, w: np.ndarray, rows: np.ndarray, tol: float) -> Check:
    if not rows.any():
        return Check("row sums", "info", "no row with a kept key to sum")
    sums = w.sum(-1)[rows]
    worst = float(np.abs(sums - 1.0).max())
    if worst > tol:
        low = float(sums.min())
        blocked_zero = not (np.abs(w[result.hard & rows[..., None]]) > 1e-6).any()
        why = (" with the blocked cells at 0: the mask was applied AFTER the softmax without renormalising (P3)"
               if blocked_zero and low < 1 - tol else "")
        return Check("row sums", "fail", f"row sums range {float(sums.min()):.6f}..{float(sums.max()):.6f}{why}")
    return Check("row sums", "ok", f"{int(rows.sum())} row(s) sum to 1 within {worst:.2g}")


def nan_check(result: MaskResult, nan_row: np.ndarray, live: np.ndarray) -> Check:
    bad = nan_row & live
    if bad.any():
        return Check("NaN rows", "fail", f"{int(bad.sum())} row(s) with kept keys hold NaN (P4: -inf everywhere, or NaN in "
                     f"the mask); first (b,h,q)={tuple(int(i) for i in np.argwhere(bad)[0])}")
    n = int((nan_row & ~live).sum())
    return Check("NaN rows", "ok" if n == 0 else "info",
                 "no NaN" if n == 0 else f"NaN only in {n} fully masked row(s) (a naive softmax over -inf, P4)")


def row_kind(row: np.ndarray) -> str:
    if np.isnan(row).any():
        return "nan"
    if np.allclose(row, 0.0, atol=1e-7):
        return "zeros"
    if np.allclose(row, 1.0 / row.size, rtol=1e-3, atol=1e-6):
        return "uniform"
    return "other"


def fully_masked_check(result: MaskResult, w: np.ndarray, live: np.ndarray) -> Check:
    rows = np.argwhere(~live)
    if not len(rows):
        return Check("fully masked rows", "ok", "none")
    seen: dict[str, int] = {}
    mismatched = 0
    for bb, hh, qq in rows:
        kind = row_kind(w[bb, hh, qq])
        seen[kind] = seen.get(kind, 0) + 1
        if kind != result.row_outcome(int(bb), int(hh), int(qq)):
            mismatched += 1
    found = ", ".join(f"{k} x{n}" for k, n in sorted(seen.items()))
    expected = "/".join(sorted({result.row_outcome(*map(int, r)) for r in rows}))
    if mismatched:
        return Check("fully masked rows", "info", f"{len(rows)} row(s) hold {found}; {result.convention} would give "
                     f"{expected} (backends disagree here: tracer gives zeros)")
    return Check("fully masked rows", "ok", f"{len(rows)} row(s) hold {found}, as {result.convention} gives")


def score_checks(result: MaskResult, w: np.ndarray, s: np.ndarray, live: np.ndarray, tol: float) -> list[Check]:
    checks = []
    unmasked = softmax(s)
    blocked_rows = live & (~result.keep).any(-1)
    same = np.isclose(w, unmasked, atol=tol, rtol=0).all(-1) & blocked_rows
    if same.any():
        checks.append(Check("unmasked rows", "fail", f"{int(same.sum())} row(s) with blocked keys equal the UNMASKED "
                            f"softmax of the scores: the mask was not applied, or its fill is too small (P5)"))
    else:
        checks.append(Check("unmasked rows", "ok", f"no masked row equals the unmasked softmax ({int(blocked_rows.sum())} checked)"))
    expected = expected_weights(result, s)
    both = live[..., None] & np.isfinite(expected) & np.isfinite(w)
    delta = float(np.abs(np.where(both, w - expected, 0.0)).max()) if both.any() else 0.0
    status = "ok" if delta <= 10 * tol else "fail"
    checks.append(Check("expected weights", status, f"max |weights - softmax under {result.convention}| = {delta:.3g} "
                        f"on rows with kept keys"))
    return checks
