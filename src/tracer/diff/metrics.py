"""How far apart two arrays are: pure functions over NumPy arrays.

`ref` is always the trusted side and `mine` the one being checked; relative
measures divide by the reference. Every function works in float64 so the
measurement adds no rounding of its own. Non-finite cells are the caller's
business (see `nonfinite_mismatch`): these functions see finite values only.
"""

from __future__ import annotations

import math

import numpy as np

# Relative error is only meaningful where the reference is not ~0; cells smaller
# than this fraction of the reference's largest magnitude are left to atol.
REL_FLOOR = 1e-6


def as_f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def max_abs(ref: np.ndarray, mine: np.ndarray) -> float:
    """max |mine - ref|."""
    if ref.size == 0:
        return 0.0
    return float(np.max(np.abs(as_f64(mine) - as_f64(ref))))


def mean_abs(ref: np.ndarray, mine: np.ndarray) -> float:
    """mean |mine - ref|."""
    if ref.size == 0:
        return 0.0
    return float(np.mean(np.abs(as_f64(mine) - as_f64(ref))))


def max_rel(ref: np.ndarray, mine: np.ndarray) -> float:
    """max |mine - ref| / |ref| over cells where |ref| >= REL_FLOOR * max|ref|."""
    r, m = as_f64(ref), as_f64(mine)
    scale = np.abs(r)
    if scale.size == 0 or not scale.max() > 0:
        return 0.0 if np.array_equal(r, m) else math.inf
    big = scale >= REL_FLOOR * scale.max()
    return float(np.max(np.abs(m[big] - r[big]) / scale[big]))


def cosine(ref: np.ndarray, mine: np.ndarray) -> float:
    """cos(ref, mine) over the flattened arrays; 1.0 when both are all zero."""
    r, m = as_f64(ref).ravel(), as_f64(mine).ravel()
    if np.array_equal(r, m):
        return 1.0  # exact, where the formula would round to 1 +- 1e-16
    nr, nm = float(np.linalg.norm(r)), float(np.linalg.norm(m))
    if nr == 0.0 or nm == 0.0:
        return 0.0
    return float(np.clip(np.dot(r, m) / (nr * nm), -1.0, 1.0))


def nmse(ref: np.ndarray, mine: np.ndarray) -> float:
    """sum (mine - ref)^2 / sum ref^2: error energy relative to signal energy (0 = exact)."""
    r, m = as_f64(ref).ravel(), as_f64(mine).ravel()
    err = float(np.dot(m - r, m - r))
    if err == 0.0:
        return 0.0
    signal = float(np.dot(r, r))
    return err / signal if signal > 0.0 else math.inf


def to_db(ratio: float) -> float:
    """10 log10(ratio); -inf for an exact match."""
    if ratio <= 0.0:
        return -math.inf
    return 10.0 * math.log10(ratio)


def nmse_db(ref: np.ndarray, mine: np.ndarray) -> float:
    """NMSE in decibels: -140 dB is float32 rounding, -20 dB is a 10% error, -inf is exact."""
    return to_db(nmse(ref, mine))


def tolerance_excess(ref: np.ndarray, mine: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """|mine - ref| / (atol + rtol |ref|) per cell: a cell passes when this is <= 1 (np.allclose's test)."""
    r, m = as_f64(ref), as_f64(mine)
    allowed = atol + rtol * np.abs(r)
    err = np.abs(m - r)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1.0), np.where(err > 0, np.inf, 0.0))


def nonfinite_mismatch(ref: np.ndarray, mine: np.ndarray) -> np.ndarray:
    """Cells where the NaN / +inf / -inf pattern differs (equal infinities are equal)."""
    r, m = np.asarray(ref), np.asarray(mine)
    same_nan = np.isnan(r) == np.isnan(m)
    same_posinf = np.isposinf(r) == np.isposinf(m)
    same_neginf = np.isneginf(r) == np.isneginf(m)
    return ~(same_nan & same_posinf & same_neginf)


# ---------- distributions over the vocabulary (last axis) ----------


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, in float64."""
    x = as_f64(logits)
    x = x - np.max(x, axis=-1, keepdims=True)
    return x - np.log(np.sum(np.exp(x), axis=-1, keepdims=True))


def log_probs_from_probs(probs: np.ndarray) -> np.ndarray:
    """log p, with zeros kept at -inf (a zero-probability token carries no KL mass from its own side)."""
    with np.errstate(divide="ignore"):
        return np.log(as_f64(probs))


def kl_divergence(log_p: np.ndarray, log_q: np.ndarray) -> np.ndarray:
    """KL(P || Q) = sum_v p (log p - log q) per position, in nats; shape = leading axes."""
    p = np.exp(log_p)
    with np.errstate(invalid="ignore"):
        terms = np.where(p > 0, p * (log_p - log_q), 0.0)
    return np.maximum(np.sum(terms, axis=-1), 0.0)  # clip -1e-17 rounding


def top1_agreement(ref_scores: np.ndarray, mine_scores: np.ndarray) -> np.ndarray:
    """Per position: do both put the same token first? bool, shape = leading axes."""
    return np.argmax(ref_scores, axis=-1) == np.argmax(mine_scores, axis=-1)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries of the last axis, unordered; shape = leading axes + (k,)."""
    k = min(k, scores.shape[-1])
    return np.argpartition(-as_f64(scores), k - 1, axis=-1)[..., :k]


def topk_overlap(ref_scores: np.ndarray, mine_scores: np.ndarray, k: int) -> np.ndarray:
    """Per position: |top-k(ref) ∩ top-k(mine)| / k, in [0, 1]."""
    a, b = top_k(ref_scores, k), top_k(mine_scores, k)  # [..., k]
    shared = (a[..., :, None] == b[..., None, :]).any(axis=-1).sum(axis=-1)
    return shared / a.shape[-1]


# ---------- everything at once, in bounded memory ----------

CHUNK = 1 << 22  # cells per pass: 32 MB of float64 temporaries whatever the step's size


def error_summary(ref: np.ndarray, mine: np.ndarray, atol: float, rtol: float, chunk: int = CHUNK) -> dict:
    """The per-step measures above over two 1-d arrays, in chunks so a [batch, pos, vocab] step costs no copies.

    Returns compared (finite cells), nonfinite_mismatch (cells whose NaN/inf pattern differs) and
    first_nonfinite (flat index or -1), max_abs, mean_abs, max_rel, cosine, nmse, outside (cells
    outside atol + rtol|ref|), worst (flat index of the largest tolerance excess) and worst_excess.
    """
    n = ref.size
    spans = [(i, min(i + chunk, n)) for i in range(0, n, chunk)]
    ref_absmax = 0.0
    for lo, hi in spans:
        r = as_f64(ref[lo:hi])
        finite = np.isfinite(r)
        if finite.any():
            ref_absmax = max(ref_absmax, float(np.max(np.abs(r[finite]))))
    floor = REL_FLOOR * ref_absmax
    acc = dict(compared=0, nonfinite_mismatch=0, first_nonfinite=-1, max_abs=0.0, sum_abs=0.0, max_rel=0.0,
               dot=0.0, ref_sq=0.0, mine_sq=0.0, err_sq=0.0, outside=0, worst=0, worst_excess=0.0, identical=True)
    for lo, hi in spans:
        _accumulate(acc, as_f64(ref[lo:hi]), as_f64(mine[lo:hi]), lo, atol, rtol, floor)
    return _finish(acc, ref_absmax)


def _accumulate(acc: dict, r: np.ndarray, m: np.ndarray, offset: int, atol: float, rtol: float, floor: float) -> None:
    bad = nonfinite_mismatch(r, m)
    if bad.any():
        if acc["first_nonfinite"] < 0:
            acc["first_nonfinite"] = offset + int(np.argmax(bad))
        acc["nonfinite_mismatch"] += int(bad.sum())
    finite = np.isfinite(r) & np.isfinite(m)
    if not finite.all():
        keep = np.flatnonzero(finite)
        r, m = r[keep], m[keep]
    else:
        keep = None
    if r.size == 0:
        return
    err = np.abs(m - r)
    acc["identical"] = acc["identical"] and not err.any()
    acc["compared"] += r.size
    acc["max_abs"] = max(acc["max_abs"], float(err.max()))
    acc["sum_abs"] += float(err.sum())
    big = np.abs(r) >= floor if floor > 0 else np.abs(r) > 0
    if big.any():
        acc["max_rel"] = max(acc["max_rel"], float(np.max(err[big] / np.abs(r[big]))))
    elif err.any() and floor == 0:
        acc["max_rel"] = math.inf
    acc["dot"] += float(np.dot(r, m))
    acc["ref_sq"] += float(np.dot(r, r))
    acc["mine_sq"] += float(np.dot(m, m))
    acc["err_sq"] += float(np.dot(m - r, m - r))
    allowed = atol + rtol * np.abs(r)
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1.0), np.where(err > 0, np.inf, 0.0))
    acc["outside"] += int((excess > 1.0).sum())
    k = int(np.argmax(excess))
    if excess[k] > acc["worst_excess"]:
        acc["worst_excess"] = float(excess[k])
        acc["worst"] = offset + (int(keep[k]) if keep is not None else k)


def _finish(acc: dict, ref_absmax: float) -> dict:
    if acc["identical"]:
        cos = 1.0
    elif acc["ref_sq"] == 0.0 or acc["mine_sq"] == 0.0:
        cos = 0.0
    else:
        cos = float(np.clip(acc["dot"] / math.sqrt(acc["ref_sq"] * acc["mine_sq"]), -1.0, 1.0))
    if acc["err_sq"] == 0.0:
        ratio = 0.0
    else:
        ratio = acc["err_sq"] / acc["ref_sq"] if acc["ref_sq"] > 0 else math.inf
    return {
        "compared": acc["compared"],
        "nonfinite_mismatch": acc["nonfinite_mismatch"],
        "first_nonfinite": acc["first_nonfinite"],
        "max_abs": acc["max_abs"],
        "mean_abs": acc["sum_abs"] / acc["compared"] if acc["compared"] else 0.0,
        "max_rel": acc["max_rel"],
        "cosine": cos,
        "nmse": ratio,
        "outside": acc["outside"],
        "worst": acc["worst"],
        "worst_excess": acc["worst_excess"],
    }
