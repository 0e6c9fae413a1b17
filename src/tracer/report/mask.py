"""How this run's attention mask was built: its parts, their broadcasts, and the keep grid of one batch row."""

from __future__ import annotations

import numpy as np

from tracer.engine.masks import build_keep, positions_by_rule

BUCKET_ROWS = 12  # distances shown in the T5 bucket table


def attention_mask_from_tokens(meta: dict, key: str = "tokens") -> np.ndarray:
    """[batch, pos] 1 = real token, 0 = padding, from a token table (works for stats-only traces)."""
    return np.array([[0 if t.get("pad") else 1 for t in row] for row in meta[key]], dtype=np.int64)


def stack_and_tokens(spec: dict, stack: str) -> tuple[dict, str, str]:
    """(the stack's spec, its token table key in the meta, its step-name prefix) for "", "encoder" or "decoder"."""
    if stack == "encoder":
        return spec.get("encoder") or spec, "tokens", "encoder."
    if stack == "decoder":
        return spec, "decoder_tokens", "decoder."
    return spec, "tokens", ""


def resolve_layer(layer: int | None, n_layers: int) -> int:
    from tracer.errors import TracerError

    if layer is None:
        return n_layers - 1
    chosen = layer + n_layers if layer < 0 else layer
    if not 0 <= chosen < n_layers:
        raise TracerError(f"`layer` {layer} is out of range: the model has {n_layers} blocks (0..{n_layers - 1})")
    return chosen


def _axes(names: list[str], shape: tuple[int, ...]) -> str:
    """Named where the axis is real, a bare 1 where it is added for broadcasting."""
    return "[" + ", ".join("1" if a == "1" else f"{a}={n}" for a, n in zip(names, shape)) + "]"


def mask_report(trace, spec: dict, row: int, layer: int, stack: str = "", part: str = "attn") -> dict:
    """How layer `layer`'s mask was built. stack: "" (single-stack model), "encoder" or "decoder";
    part: "attn" (self-attention) or "cross_attn" (decoder queries over encoder keys)."""
    meta = trace.meta
    mm = meta.get("mask", {})
    sspec, tokens_key, prefix = stack_and_tokens(spec, stack)
    q_mask = attention_mask_from_tokens(meta, tokens_key)  # [batch, q]
    if part == "cross_attn":
        return cross_mask_report(trace, spec, row, layer, q_mask, attention_mask_from_tokens(meta, "tokens"))
    attention_mask = q_mask
    bsz, q_len = attention_mask.shape
    windows = (mm.get("windows") or {}) if stack != "encoder" else {}
    window = windows.get(str(layer))
    name = f"{prefix}blocks.{layer}.attn.mask"
    recorded = trace.step(name) if name in trace else None
    sharing = [int(k) for k, w in windows.items() if w == window]
    causal = bool(sspec.get("causal", True)) if stack else bool(mm.get("causal", spec.get("causal", True)))
    out = {
        "layer": layer, "stack": stack, "part": part, "step": name, "source": mm.get("source", "built"), "window": window,
        "causal": causal, "layers_sharing": sharing if len(sharing) != len(windows) else "all",
        "dtype": recorded.dtype if recorded else "bool",
        "shape": list(recorded.shape) if recorded else [bsz, 1, q_len, q_len],
        "axes": list(recorded.axes) if recorded else ["batch", "heads", "q_len", "kv_len"],
        "scores_shape": [bsz, sspec["n_heads"], q_len, q_len], "batch_row": row,
    }
    if out["source"] == "override":
        out["note"] = mm.get("note", "")
        keep = recorded.array if recorded is not None and recorded.kept else None
        out["parts"] = []
        out["grids"] = {"keep": keep[row, 0].tolist()} if keep is not None else {}
        out["fully_masked_rows"] = sorted({r[2] for r in mm.get("fully_masked", []) if r[0] == row})
        return out
    parts = build_keep(attention_mask, causal, window, q_len)
    padded = bool((attention_mask == 0).any())
    described = []
    if parts.causal is not None:
        described.append({"name": "causal", "rule": "key j <= query i: no looking ahead", "dtype": "bool",
                          "shape": [q_len, q_len], "axes": ["q_len", "kv_len"],
                          "broadcast": "causal[None, None] -> " + _axes(["1", "1", "q_len", "kv_len"], (1, 1, q_len, q_len))})
    if parts.window is not None:
        note = f" (covers all {q_len} positions here: no effect)" if window >= q_len else ""
        described.append({"name": "window", "rule": f"key j > query i - {window}: the last {window} keys{note}",
                          "dtype": "bool", "shape": [q_len, q_len], "axes": ["q_len", "kv_len"],
                          "broadcast": "window[None, None] -> " + _axes(["1", "1", "q_len", "kv_len"], (1, 1, q_len, q_len))})
    if padded:
        described.append({"name": "padding", "rule": "input.mask[b, j] == 1: keys that are real tokens", "dtype": "bool",
                          "shape": [bsz, q_len], "axes": ["batch", "kv_len"],
                          "broadcast": "padding[:, None, None, :] -> " + _axes(["batch", "1", "1", "kv_len"], (bsz, 1, 1, q_len))})
    out["parts"] = described
    out["combine"] = " & ".join(p["name"] for p in described) or "nothing blocked (bidirectional, no padding)"
    full = np.broadcast_to(parts.keep, (bsz, 1, q_len, q_len))
    grids = {}
    if parts.causal is not None:
        grids["causal"] = parts.causal
    if parts.window is not None:
        grids["window"] = parts.window
    if padded:
        grids["padding"] = np.broadcast_to(parts.padding[row, 0], (q_len, q_len))
    grids["keep"] = full[row, 0]
    out["grids"] = {k: np.asarray(v).tolist() for k, v in grids.items()}
    out["fully_masked_rows"] = [int(q) for q in np.flatnonzero(~full[row, 0].any(axis=-1))]
    out["notes"] = route_notes(causal, padded, attention_mask[row])
    out["positions"] = positions_report(attention_mask, row, sspec, meta.get("positions") if stack != "decoder" else None)
    if sspec.get("relative_bias"):
        out["buckets"] = bucket_table(trace, sspec, prefix, layer, causal)
    if recorded is not None and recorded.kept:
        out["matches_recorded"] = bool(np.array_equal(np.broadcast_to(recorded.array, full.shape), full))
    return out


def route_notes(causal: bool, padded: bool, row_mask: np.ndarray) -> list[str]:
    """What the route's mask means that the grid alone does not say."""
    if causal:
        return []
    notes = ["bidirectional: every real token reads every real token, before and after it (no causal part)"]
    if padded and (row_mask == 0).any():
        notes.append("padded query rows still attend, as in transformers (padding masks keys only); "
                     "their outputs are never read by real tokens, so they are harmless but not zero")
    return notes


def cross_mask_report(trace, spec: dict, row: int, layer: int, dec_mask: np.ndarray, enc_mask: np.ndarray) -> dict:
    """Cross-attention: the encoder's padding, broadcast over every decoder row; no causal part."""
    bsz, dec_len = dec_mask.shape
    enc_len = enc_mask.shape[1]
    name = f"decoder.blocks.{layer}.cross_attn.mask"
    recorded = trace.step(name) if name in trace else None
    keep = np.broadcast_to((enc_mask != 0)[:, None, None, :], (bsz, 1, dec_len, enc_len))
    out = {
        "layer": layer, "stack": "decoder", "part": "cross_attn", "step": name, "source": "built", "window": None,
        "causal": False, "layers_sharing": "all", "dtype": "bool",
        "shape": list(recorded.shape) if recorded else [bsz, 1, 1, enc_len],
        "axes": ["batch", "heads", "q_len", "kv_len"],
        "scores_shape": [bsz, spec["n_heads"], dec_len, enc_len], "batch_row": row,
        "parts": [{"name": "encoder padding", "rule": "input.mask[b, j] == 1: encoder positions that are real tokens",
                   "dtype": "bool", "shape": [bsz, enc_len], "axes": ["batch", "enc_pos"],
                   "broadcast": "padding[:, None, None, :] -> " + _axes(["batch", "1", "1", "kv_len"], (bsz, 1, 1, enc_len))
                   + f", then over all {dec_len} decoder rows"}],
        "combine": "encoder padding",
        "grids": {"keep": keep[row, 0].tolist()},
        "fully_masked_rows": [],
        "notes": ["cross-attention: rows are decoder positions, columns encoder positions; no causal part "
                  "(every decoder position may read the whole input)"],
    }
    if recorded is not None and recorded.kept:
        out["matches_recorded"] = bool(np.array_equal(np.broadcast_to(recorded.array, keep.shape), keep))
    return out


def bucket_table(trace, sspec: dict, prefix: str, layer: int, causal: bool) -> dict:
    """T5: relative distance (key - query) -> bucket -> bias per head, as block `layer` adds it to the scores."""
    from tracer.engine.relative_bias import relative_buckets

    rel = sspec["relative_bias"]
    name = f"{prefix}blocks.{layer}.attn.position_bias"
    step = trace.step(name) if name in trace else None
    out = {"step": name, "num_buckets": rel["num_buckets"], "max_distance": rel["max_distance"],
           "bidirectional": not causal, "rows": [], "shared": "computed in block 0 of this stack, reused by every block"}
    if step is None or not step.kept:
        out["missing"] = f"{name} was not kept whole"
        return out
    bias = step.array[0]  # [heads, q, k]
    q_len = bias.shape[1]
    q = q_len - 1 if causal else q_len // 2  # a query with keys on both sides (encoder) or behind it (decoder)
    distances = sorted({k - q for k in range(bias.shape[2])}, key=lambda d: (abs(d), d))[:BUCKET_ROWS]
    buckets = relative_buckets(np.array(distances), not causal, rel["num_buckets"], rel["max_distance"])
    for d, b in sorted(zip(distances, buckets.tolist())):
        out["rows"].append({"distance": int(d), "bucket": int(b), "bias": [float(x) for x in bias[:, q, q + d]]})
    out["query"] = int(q)
    return out
def positions_report(attention_mask: np.ndarray, row: int, spec: dict, rule: str | None = None) -> dict | None:
    """Left padding moves real tokens right; the position ids say how tracer keeps them at 0, 1, 2, ...
    With learned absolute positions that is where ports go wrong (mask lab warning ML012).
    rule: the position rule in force ("mask" or "index"); default the family's."""
    rule = rule or spec.get("position_rule", "mask")
    if spec.get("positions") == "relative" or not (attention_mask[:, 0] == 0).any():
        return None
    positions = positions_by_rule(attention_mask, rule)[row]
    learned = spec.get("positions") == "learned"
    if rule == "index":
        return {"rule": "position_ids = 0..n-1 (the family's rule, as transformers computes it)",
                "row": [int(p) for p in positions],
                "warning": {"code": "ML012", "level": "warn" if learned else "info", "message":
                            "left padding with positions 0..n-1: the real tokens of a left-padded row start at "
                            "the pad count, not 0, so they read other position embeddings than the same prompt "
                            "alone (transformers does the same); --positions from-mask counts from the first real token"}}
    message = ("left padding with learned absolute positions: real tokens must start at position 0, so tracer "
               "uses position_ids = cumsum(mask) - 1 (pads 0); a bare transformers forward() without position_ids "
               "uses arange and shifts every real token by the pad count" if learned else
               "left padding with rotary positions: a uniform shift would not change attention, but prefill and "
               "decode must count positions the same way; tracer uses cumsum(mask) - 1 (pads 0)")
    return {"rule": "position_ids = cumsum(mask) - 1, pads 0", "row": [int(p) for p in positions],
            "warning": {"code": "ML012", "level": "warn" if learned else "info", "message": message}}
