"""How this run's attention mask was built: its parts, their broadcasts, and the keep grid of one batch row."""

from __future__ import annotations

import numpy as np

from tracer.masks.build import build_keep, positions_from_mask


def attention_mask_from_tokens(meta: dict) -> np.ndarray:
    """[batch, pos] 1 = real token, 0 = padding, from the token table (works for stats-only traces)."""
    return np.array([[0 if t.get("pad") else 1 for t in row] for row in meta["tokens"]], dtype=np.int64)


def resolve_layer(layer: int | None, n_layers: int) -> int:
    from tracer.errors import TracerError

    if layer is None:
        return n_layers - 1
    chosen = layer + n_layers if layer < 0 else layer
    if not 0 <= chosen < n_layers:
        raise TracerError(f"--layer {layer} is out of range: the model has {n_layers} blocks (0..{n_layers - 1})")
    return chosen


def _axes(names: list[str], shape: tuple[int, ...]) -> str:
    """Named where the axis is real, a bare 1 where it is added for broadcasting."""
    return "[" + ", ".join("1" if a == "1" else f"{a}={n}" for a, n in zip(names, shape)) + "]"


def mask_report(trace, spec: dict, row: int, layer: int) -> dict:
    meta = trace.meta
    mm = meta.get("mask", {})
    attention_mask = attention_mask_from_tokens(meta)  # [batch, kv]
    bsz, q_len = attention_mask.shape
    windows = mm.get("windows") or {}
    window = windows.get(str(layer))
    recorded = trace.step(f"blocks.{layer}.attn.mask") if f"blocks.{layer}.attn.mask" in trace else None
    sharing = [int(k) for k, w in windows.items() if w == window]
    out = {
        "layer": layer, "source": mm.get("source", "built"), "window": window,
        "layers_sharing": sharing if len(sharing) != len(windows) else "all",
        "dtype": recorded.dtype if recorded else "bool",
        "shape": list(recorded.shape) if recorded else [bsz, 1, q_len, q_len],
        "axes": list(recorded.axes) if recorded else ["batch", "heads", "q_len", "kv_len"],
        "scores_shape": [bsz, spec["n_heads"], q_len, q_len], "batch_row": row,
    }
    if out["source"] == "override":
        out["note"] = mm.get("note", "")
        keep = recorded.array if recorded is not None and recorded.kept else None
        out["parts"] = []
        out["grids"] = {"keep": keep[row, 0].tolist()} if keep is not None else {}
        out["fully_masked_rows"] = sorted({r[2] for r in mm.get("fully_masked", []) if r[0] == row})
        return out
    parts = build_keep(attention_mask, bool(mm.get("causal", spec.get("causal", True))), window, q_len)
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
    out["positions"] = positions_report(attention_mask, row, spec)
    if recorded is not None and recorded.kept:
        out["matches_recorded"] = bool(np.array_equal(np.broadcast_to(recorded.array, full.shape), full))
    return out


def positions_report(attention_mask: np.ndarray, row: int, spec: dict) -> dict | None:
    """Left padding moves real tokens right; the position ids say how tracer keeps them at 0, 1, 2, ...
    With learned absolute positions that is where ports go wrong (mask lab warning ML012)."""
    if not (attention_mask[:, 0] == 0).any():
        return None
    positions = positions_from_mask(attention_mask)[row]
    learned = spec.get("positions") == "learned"
    message = ("left padding with learned absolute positions: real tokens must start at position 0, so tracer "
               "uses position_ids = cumsum(mask) - 1 (pads 0); a bare transformers forward() without position_ids "
               "uses arange and shifts every real token by the pad count" if learned else
               "left padding with rotary positions: a uniform shift would not change attention, but prefill and "
               "decode must count positions the same way; tracer uses cumsum(mask) - 1 (pads 0)")
    return {"rule": "position_ids = cumsum(mask) - 1, pads 0", "row": [int(p) for p in positions],
            "warning": {"code": "ML012", "level": "warn" if learned else "info", "message": message}}
