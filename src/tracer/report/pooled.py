"""An encoder without a head: the sentence embedding it declares, its norm, and how similar the batch's prompts are."""

from __future__ import annotations

import numpy as np

PREVIEW = 4  # values shown from each end of the vector


def pooled_report(trace, spec: dict, row: int) -> dict:
    pooling = spec.get("pooling") or {}
    out = {"step": "pooled", "batch_row": row, "mode": pooling.get("mode", "mean"),
           "normalize": bool(pooling.get("normalize")), "source": pooling.get("source", "default")}
    if "pooled" not in trace or not trace.step("pooled").kept:
        out["missing"] = "pooled was kept as statistics only; add --keep pooled"
        return out
    v = trace["pooled"].astype(np.float64)  # [batch, d_model]
    norms = np.linalg.norm(v, axis=-1)
    out.update({
        "dim": int(v.shape[-1]),
        "norm": float(norms[row]),
        "head": [float(x) for x in v[row, :PREVIEW]],
        "tail": [float(x) for x in v[row, -PREVIEW:]],
        "raw_norm": _raw_norm(trace, spec, row),
    })
    if v.shape[0] > 1:
        unit = v / np.maximum(norms[:, None], 1e-12)
        out["cosine"] = (unit @ unit.T).tolist()  # [batch, batch]
        out["prompts"] = trace.meta.get("prompts")
    return out


def _raw_norm(trace, spec: dict, row: int) -> float | None:
    """The pooled vector's norm before L2 normalisation (mean pooling only), from the last block's output."""
    pooling = spec.get("pooling") or {}
    last = f"blocks.{spec.get('n_layers', 1) - 1}.resid_post"
    if not pooling.get("normalize") or pooling.get("mode", "mean") != "mean" or last not in trace or not trace.step(last).kept:
        return None
    x = trace[last][row].astype(np.float64)  # [pos, d_model]
    real = np.array([not t.get("pad") for t in trace.meta["tokens"][row]])
    return float(np.linalg.norm(x[real].mean(axis=0)))
