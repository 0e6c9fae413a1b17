"""The logit lens over many positions at once: a layers x positions grid for the HTML report.

Per residual (embed.out, then each blocks.{i}.resid_post) and per shown
position: the lens's own top token and how much it already believes the
token the model finally predicts there (and a --target token, when given).
"""

from __future__ import annotations

import numpy as np

from tracer.engine.ops import softmax
from tracer.report.lens import lens_logits, rank_of, residual_steps
from tracer.report.distribution import distribution_at, vocab_entry


def lens_grid(trace, model, row: int, positions: list[int], vocab, target_id: int | None = None,
              tokens_key: str = "tokens") -> dict:
    """{"positions", "layers": [{"layer", "step", "cells": [...]}], "final_top": [...]}, or {"missing": why}.

    positions index `tokens_key` ("decoder_tokens" for an encoder-decoder model, whose decoder the lens reads)."""
    out: dict = {"positions": list(positions), "tokens": tokens_key, "layers": [], "target": None}
    if model is None:
        out["missing"] = "the logit lens needs the model's weights (tracer report --model DIR)"
        return out
    if getattr(model.spec, "head", "lm") != "lm":
        out["missing"] = "the logit lens reads a decoder stack through the LM head; this model has none"
        return out
    prefix = "decoder." if getattr(model.spec, "route", "decoder") == "encoder-decoder" else ""
    finals = []
    for p in positions:
        probs, _, missing = distribution_at(trace, row, p)
        if probs is None:
            out["missing"] = missing
            return out
        finals.append(int(np.argmax(probs)))
    out["final_top"] = [vocab_entry(t, vocab) for t in finals]
    if target_id is not None:
        out["target"] = vocab_entry(target_id, vocab)
    idx = np.asarray(positions, dtype=np.int64)
    for label, name in residual_steps(model.spec.n_layers, prefix):
        if name not in trace or not trace.step(name).kept:
            out["missing"] = f"{name} was kept as statistics only; add --keep embed.out --keep '*.resid_post'"
            out["layers"] = []
            return out
        resid = trace[name][row][idx][None]  # [1, n, d_model]
        probs = softmax(lens_logits(resid, model.weights, model.spec, prefix).astype(np.float64))[0]  # [n, vocab]
        cells = []
        for k, final in enumerate(finals):
            top = int(np.argmax(probs[k]))
            cell = {"top": vocab_entry(top, vocab), "top_prob": float(probs[k, top]),
                    "final_prob": float(probs[k, final]), "final_rank": rank_of(probs[k], final)}
            if target_id is not None:
                cell["target_prob"] = float(probs[k, target_id])
                cell["target_rank"] = rank_of(probs[k], target_id)
            cells.append(cell)
        out["layers"].append({"layer": label, "step": name, "cells": cells})
    return out
