"""How two next-token distributions differ per position: KL both ways, top-1 agreement, top-k overlap."""

from __future__ import annotations

import numpy as np

from tracer.diff import metrics as M


def is_distribution_step(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last in ("logits", "probs")


def log_distribution(name: str, a: np.ndarray) -> np.ndarray:
    """log-probabilities over the last axis, from logits or from probabilities."""
    return M.log_probs_from_probs(a) if name.rsplit(".", 1)[-1] == "probs" else M.log_softmax(a)


def distribution_diff(name: str, ref: np.ndarray, mine: np.ndarray, axes: tuple[str, ...],
                      real_rows: np.ndarray | None, top_k: int) -> dict | None:
    """Per-position and summary comparison of two [..., vocab] steps (real positions only)."""
    if ref.ndim < 2:
        return None
    lead, vocab = ref.shape[:-1], ref.shape[-1]
    index = np.argwhere(np.ones(lead, dtype=bool) if real_rows is None else real_rows)  # [n, len(lead)]
    flat = np.ravel_multi_index(index.T, lead) if len(index) else np.zeros(0, dtype=np.int64)
    rows_ref, rows_mine = ref.reshape(-1, vocab), mine.reshape(-1, vocab)
    kl_rm, kl_mr, top_ref, top_mine, overlap = (np.zeros(len(flat)) for _ in range(5))
    step = max(1, M.CHUNK // vocab)  # rows per pass: the float64 log-probabilities stay bounded
    for lo in range(0, len(flat), step):
        rows = flat[lo : lo + step]
        chunk_ref, chunk_mine = rows_ref[rows], rows_mine[rows]  # [rows, vocab]
        if not (np.isfinite(chunk_ref).all() and np.isfinite(chunk_mine).all()):
            return None  # NaN/inf: the step's own verdict says so; a KL of it would mean nothing
        lp_ref, lp_mine = log_distribution(name, chunk_ref), log_distribution(name, chunk_mine)
        kl_rm[lo : lo + step] = M.kl_divergence(lp_ref, lp_mine)
        kl_mr[lo : lo + step] = M.kl_divergence(lp_mine, lp_ref)
        top_ref[lo : lo + step] = np.argmax(lp_ref, axis=-1)
        top_mine[lo : lo + step] = np.argmax(lp_mine, axis=-1)
        overlap[lo : lo + step] = M.topk_overlap(lp_ref, lp_mine, top_k)
    axis_names = list(axes[:-1]) if len(axes) == ref.ndim else [f"dim{i}" for i in range(ref.ndim - 1)]
    positions = [
        {
            **{axis: int(i) for axis, i in zip(axis_names, idx)},
            "kl_ref_mine": float(kl_rm[j]),
            "kl_mine_ref": float(kl_mr[j]),
            "top1_ref": int(top_ref[j]),
            "top1_mine": int(top_mine[j]),
            "top1_agree": bool(top_ref[j] == top_mine[j]),
            "topk_overlap": float(overlap[j]),
        }
        for j, idx in enumerate(index)
    ]
    n = max(len(flat), 1)
    return {
        "k": int(min(top_k, vocab)),
        "positions": len(flat),
        "kl_ref_mine": {"mean": float(kl_rm.sum() / n), "max": float(kl_rm.max(initial=0.0))},
        "kl_mine_ref": {"mean": float(kl_mr.sum() / n), "max": float(kl_mr.max(initial=0.0))},
        "top1_agreement": float((top_ref == top_mine).sum() / n),
        "topk_overlap": float(overlap.sum() / n),
        "per_position": positions,
    }


def final_probs(trace, batch: int, pos: int) -> np.ndarray | None:
    """[vocab] float64 probabilities at one position, from the trace's probs, else softmax of its logits."""
    for name in ("probs", "logits"):
        if name in trace and trace.step(name).array is not None:
            row = trace[name][batch, pos]
            return np.exp(M.log_softmax(row)) if name == "logits" else np.asarray(row, dtype=np.float64)
    return None


def moved_tokens(ref_trace, mine_trace, n: int = 5, piece=None) -> list[dict]:
    """Per batch row, at its last real position: the tokens whose probability moved most.

    piece: id -> display string (a tokenizer's), or None to show ids only.
    """
    shapes = [t.step(step).shape for t in (ref_trace, mine_trace) for step in ("probs", "logits") if step in t]
    if len(shapes) < 2 or len(set(shapes)) != 1 or len(shapes[0]) != 3:
        return []
    batch, width = shapes[0][:2]
    mask = ref_trace["input.mask"] if "input.mask" in ref_trace and ref_trace.step("input.mask").kept else None
    rows = []
    for b in range(batch):
        real = np.flatnonzero(mask[b]) if mask is not None else np.arange(width)
        pos = int(real[-1]) if real.size else width - 1
        p_ref, p_mine = final_probs(ref_trace, b, pos), final_probs(mine_trace, b, pos)
        if p_ref is None or p_mine is None:
            return []
        delta = p_mine - p_ref  # [vocab]
        order = np.argsort(-np.abs(delta), kind="stable")[:n]

        def token(i: int) -> dict:
            entry = {"id": int(i), "ref": float(p_ref[i]), "mine": float(p_mine[i]), "delta": float(delta[i])}
            if piece is not None:
                entry["piece"] = piece(int(i))
            return entry

        rows.append({
            "batch": b,
            "pos": pos,
            "moved": [token(i) for i in order],
            "top_ref": [token(i) for i in np.argsort(-p_ref, kind="stable")[:n]],
            "top_mine": [token(i) for i in np.argsort(-p_mine, kind="stable")[:n]],
        })
    return rows
