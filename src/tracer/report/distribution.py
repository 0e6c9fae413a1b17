"""The next-token distribution at one position: top-k, an optional target token, and the logit lens rows."""

from __future__ import annotations

import math

import numpy as np

from tracer.engine.ops import softmax
from tracer.errors import TracerError
from tracer.checkpoint.pieces import shown_piece


def resolve_position(position: int | None, token_rows: list[dict]) -> int:
    """Default: the last real (non-pad) token. Negative positions count back from it."""
    real = [r["pos"] for r in token_rows if not r["pad"]]
    if not real:
        raise TracerError("this batch row has no real tokens")
    if position is None:
        return real[-1]
    chosen = real[position] if -len(real) <= position < 0 else position
    if position >= 0 and not 0 <= chosen < len(token_rows):
        raise TracerError(f"`position` {position} is out of range: the row has positions 0..{len(token_rows) - 1}")
    if position < -len(real):
        raise TracerError(f"`position` {position} is out of range: the row has {len(real)} real tokens")
    if token_rows[chosen]["pad"]:
        raise TracerError(f"`position` {position} is a padding position", hint="choose a real token's position")
    return chosen


def distribution_at(trace, row: int, position: int) -> tuple[np.ndarray | None, np.ndarray | None, str | None]:
    """(probs [vocab], logits [vocab] or None, why missing). probs come from `probs`, else softmax of `logits`."""
    logits = trace.step("logits") if "logits" in trace else None
    probs = trace.step("probs") if "probs" in trace else None
    lg = logits.array[row, position] if logits is not None and logits.kept else None
    if probs is not None and probs.kept:
        return probs.array[row, position], lg, None
    if lg is not None:
        return softmax(lg.astype(np.float64)), lg, None
    return None, None, "neither probs nor logits was kept whole; add --keep probs"


def vocab_entry(token_id: int, vocab) -> dict:
    v = vocab(token_id)
    return {"id": token_id, "piece": v["piece"], "token": shown_piece(v["piece"], v.get("bytes", ""), v.get("special", False)),
            "special": v.get("special", False)}


def entropy_bits(p: np.ndarray) -> float:
    nz = p[p > 0].astype(np.float64)
    return float(-(nz * np.log2(nz)).sum())


def top_k_report(trace, row: int, position: int, k: int, vocab, target_id: int | None = None,
                 target_text: str | None = None, target_note: str | None = None, kind: str = "next",
                 tokens_key: str = "tokens") -> dict:
    """kind: "next" (the token after `position`) or "fill" (an MLM's guess for the masked token at `position`).
    tokens_key: the token table the positions index ("decoder_tokens" in an encoder-decoder model)."""
    tokens = trace.meta[tokens_key][row]
    at = tokens[position]
    out = {"batch_row": row, "position": position, "kind": kind,
           "after": shown_piece(at["piece"], at.get("bytes", ""), at.get("special", False)),
           "step": "probs", "k": k, "top_k": []}
    probs, logits, missing = distribution_at(trace, row, position)
    if probs is None:
        out["missing"] = missing
        return out
    finite = bool(np.isfinite(probs).all())
    order = np.argsort(-np.nan_to_num(probs, nan=-np.inf), kind="stable")[:k]
    cum = 0.0
    for rank, tid in enumerate(order, start=1):
        p = float(probs[tid])
        cum += p
        entry = vocab_entry(int(tid), vocab)
        entry.update({"rank": rank, "logit": None if logits is None else float(logits[tid]), "prob": p, "cum": cum})
        out["top_k"].append(entry)
    # a row with NaN/Inf has no meaningful entropy: say so instead of printing -0.00 bits
    out["entropy_bits"] = entropy_bits(probs) if finite else None
    out["perplexity"] = 2.0 ** out["entropy_bits"] if finite else None
    if not finite:
        out["nonfinite"] = int((~np.isfinite(probs)).sum())
    if target_id is not None:
        if not 0 <= target_id < probs.shape[-1]:
            raise TracerError(f"--target id {target_id} is outside the vocabulary [0, {probs.shape[-1]})")
        t = vocab_entry(target_id, vocab)
        t.update({"text": target_text, "note": target_note, "rank": int((probs > probs[target_id]).sum()) + 1,
                  "prob": float(probs[target_id]), "logit": None if logits is None else float(logits[target_id]),
                  "log2_prob": math.log2(float(probs[target_id])) if probs[target_id] > 0 else None})
        out["target"] = t
    return out


def lens_report(trace, model, row: int, position: int, final_top: int, vocab) -> dict:
    """The logit lens rows for the screen and JSON; needs the model's weights (final norm and head)."""
    from tracer.report.lens import logit_lens, lens_rows

    out = {"batch_row": row, "position": position, "final_top": vocab_entry(final_top, vocab), "layers": []}
    if model is None:
        out["missing"] = "the logit lens needs the model's weights"
        return out
    try:
        layers = logit_lens(trace, model.weights, model.spec, row, position)
    except KeyError:
        out["missing"] = "the residual stream was kept as statistics only; add --keep embed.out --keep '*.resid_post'"
        return out
    for r in lens_rows(layers, final_top):
        r["top"] = vocab_entry(r["top_id"], vocab)
        out["layers"].append(r)
    return out
