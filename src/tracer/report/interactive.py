"""The numbers the page's live views read: attention score rows with their mask parts, and the top logits.

The page computes nothing the model computes: it holds the recorded scores (`attn.scores`, before the mask)
and the keep-mask parts the engine built, and the recorded `logits`. What it does in the browser is the
article's arithmetic on those numbers: softmax over the kept keys of one row, and softmax(logits / T) over
the stored top logits. Rows are held exactly (float32, base64 little-endian) for the query positions the
page shows (its window of a long prompt) over every key.
"""

from __future__ import annotations

import base64

import numpy as np

from tracer.report.mask import mask_report

TOP_LOGITS = 256  # logits stored per position for the live distribution
PART_REASONS = {"causal": "causal (a later key)", "window": "window (too far back)", "padding": "padding (a pad key)",
                "custom": "custom mask (--mask)", "recorded": "the decoding step's mask (as recorded)"}
CROSS_REASONS = dict(PART_REASONS, padding="encoder padding (a pad position of the input)")
ATTN_KINDS = {("", "attn"): "self", ("encoder", "attn"): "encoder", ("decoder", "attn"): "decoder",
              ("decoder", "cross_attn"): "cross"}  # the `attn=` fragment key of the row panel


def b64(array: np.ndarray, dtype: str) -> str:
    """Raw little-endian bytes of `array` as `dtype`, base64: what the page decodes with a typed array."""
    return base64.b64encode(np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()).decode("ascii")


def bits(grid: np.ndarray) -> str:
    """A boolean grid as a string of 0/1, row-major."""
    return "".join("1" if v else "0" for v in np.asarray(grid, dtype=bool).ravel())


def mask_parts(trace, spec: dict, row: int, layer: int, stack: str, rows: list[int], part: str = "attn") -> dict[str, str]:
    """The keep parts of one layer's mask on the held rows (part name -> 0/1 string over rows x keys).
    Cross-attention has one part, the encoder's padding (its keep grid), and only when the input is padded."""
    m = mask_report(trace, spec, row, layer, stack, part)
    grids = m.get("grids") or {}
    if part == "cross_attn":
        keep = np.asarray(grids["keep"], dtype=bool)[rows]  # [held rows, encoder positions]
        return {} if keep.all() else {"padding": bits(keep)}
    if m.get("source") == "override":
        keep = grids.get("keep")
        return {"custom": bits(np.asarray(keep, dtype=bool)[rows])} if keep is not None else {}
    return {name: bits(np.asarray(grids[name], dtype=bool)[rows]) for name in ("causal", "window", "padding")
            if name in grids}


def row_data(trace, spec: dict, row: int, stack: str, layers: list[int], rows: list[int], labels: list[str],
             focus_layer: int, focus_q: int, part: str = "attn", key_labels: list[str] | None = None) -> dict:
    """Per layer: scores [heads, held rows, keys] float32, any soft-cap input and position bias, the mask parts.
    stack/part: "" attn (one stack), encoder attn, decoder attn or decoder cross_attn (keys: encoder positions)."""
    prefix = f"{stack}." if stack else ""
    out = {"stack": stack, "part": part, "attn": ATTN_KINDS.get((stack, part), "self"), "rows": rows, "labels": labels,
           "key_labels": key_labels if key_labels is not None else labels, "layers": [], "layer": focus_layer,
           "q": focus_q, "reasons": CROSS_REASONS if part == "cross_attn" else PART_REASONS}
    parts_by_window: dict = {}
    windows = (trace.meta.get("mask") or {}).get("windows") or {} if stack != "encoder" and part == "attn" else {}
    ri = np.asarray(rows, dtype=np.int64)
    for layer in layers:
        name = f"{prefix}blocks.{layer}.{part}.scores"
        if name not in trace or not trace.step(name).kept:
            continue
        scores = trace.step(name).array[row][:, ri]  # [heads, held rows, keys]
        entry = {"layer": layer, "step": name, "heads": int(scores.shape[0]), "keys": int(scores.shape[-1]),
                 "scores": b64(scores, "float32")}
        raw = f"{prefix}blocks.{layer}.{part}.scores.raw"
        if raw in trace and trace.step(raw).kept:
            entry["raw"] = b64(trace.step(raw).array[row][:, ri], "float32")
        bias = f"{prefix}blocks.{layer}.{part}.position_bias"
        if bias in trace and trace.step(bias).kept:
            b = trace.step(bias).array
            entry["bias"] = b64(np.broadcast_to(b[min(row, b.shape[0] - 1)][:, ri], scores.shape), "float32")
        key = windows.get(str(layer)) if part == "attn" else layer
        if key not in parts_by_window:
            parts_by_window[key] = mask_parts(trace, spec, row, layer, stack, rows, part)
        entry["parts"] = parts_by_window[key]
        out["layers"].append(entry)
    return out


def decode_rows(trace, row: int, layer: int, prompt_len: int) -> list[dict]:
    """A generation trace's decoding steps at one layer: the new query's row of scores against the whole cache,
    with the step's recorded keep-mask row (entries of the live rows with a `decode` step and their own row)."""
    out = []
    for t in range(1, len((trace.meta.get("generation") or {}).get("rows", [{}])[row].get("steps", [])) + 1):
        name = f"decode.{t}.blocks.{layer}.attn.scores"
        if name not in trace or not trace.step(name).kept:
            continue
        scores = trace.step(name).array[row]  # [heads, 1, cache]
        mask = f"decode.{t}.blocks.{layer}.attn.mask"
        keep = (np.broadcast_to(trace.step(mask).array[min(row, trace.step(mask).shape[0] - 1)], (1,) + scores.shape[1:])[0]
                if mask in trace and trace.step(mask).kept else np.ones(scores.shape[1:], dtype=bool))  # [1, cache]
        out.append({"layer": layer, "decode": t, "step": name, "heads": int(scores.shape[0]), "keys": int(scores.shape[-1]),
                    "rows": [prompt_len - 1 + t], "scores": b64(scores, "float32"), "parts": {"recorded": bits(keep)}})
    return out


def dist_data(trace, row: int, positions: list[int], default: int, k: int, vocab_name, target_id: int | None,
              kind: str = "next") -> dict | None:
    """The top TOP_LOGITS logits (float32, in descending order) and their ids at each held position."""
    if "logits" not in trace or not trace.step("logits").kept:
        return None
    logits = trace.step("logits").array[row]  # [pos, vocab]
    n = min(TOP_LOGITS, logits.shape[-1])
    ids, values, names = [], [], {}
    for p in positions:
        lg = np.nan_to_num(logits[p].astype(np.float32), nan=-np.inf)
        top = np.argsort(-lg, kind="stable")[:n]
        ids.append(top.astype(np.int32))
        values.append(logits[p][top].astype(np.float32))
        for i in top.tolist():
            if i not in names:
                names[i] = vocab_name(i)
    if target_id is not None and target_id not in names:
        names[target_id] = vocab_name(target_id)
    return {"positions": positions, "pos": default, "n": n, "vocab": int(logits.shape[-1]), "k": k, "kind": kind,
            "ids": b64(np.stack(ids), "int32"), "logits": b64(np.stack(values), "float32"),
            "names": {str(i): s for i, s in names.items()}, "target": target_id}
