"""What the page shows beyond the screen's report: every layer's attention and the lens over positions.

The screen shows one layer and one position; a page has room for all of them,
within a budget so that long prompts and deep models still give a file a
browser opens quickly. Long prompts show a window of positions: the first few
(where attention often parks) and the ones up to the position in focus.
"""

from __future__ import annotations

import math

import numpy as np

from tracer.report.lens_grid import lens_grid
from tracer.report.mask import mask_report

MAX_SIDE = 48  # positions shown per heatmap axis
HEAD_POSITIONS = 4  # always shown at the start of a long prompt
MAX_CELLS = 40_000  # attention cells over all layers and heads (about 130 bytes each)


def shown_positions(n: int, focus: int, cap: int = MAX_SIDE) -> list[int]:
    """All positions when they fit; else the first few and a window ending at `focus` (absolute indices)."""
    if n <= cap:
        return list(range(n))
    width = cap - HEAD_POSITIONS
    start = min(max(HEAD_POSITIONS, focus - width + 1), n - width)
    return list(range(HEAD_POSITIONS)) + list(range(start, start + width))


def side_for(n_heads: int) -> int:
    """Positions per axis, so that one layer of all heads fits the cell budget (at least 16)."""
    return max(16, min(MAX_SIDE, math.isqrt(MAX_CELLS // max(1, n_heads))))


def chosen_layers(n_layers: int, per_layer: int, first: int, budget: int = MAX_CELLS) -> list[int]:
    """Every layer when they fit the budget; else the report's layer and evenly spaced others."""
    fit = max(1, budget // max(1, per_layer))
    if fit >= n_layers:
        return list(range(n_layers))
    picked = {first}
    for k in np.linspace(0, n_layers - 1, fit).round().astype(int):
        if len(picked) >= fit:
            break
        picked.add(int(k))
    return sorted(picked)


def focus_position(report: dict) -> int:
    dist = report.get("distribution") or report.get("lens") or {}
    if "position" in dist:
        return int(dist["position"])
    real = [t["pos"] for t in report.get("tokens") or [] if not t.get("pad")]
    return real[-1] if real else 0


def attention_layers(trace, spec: dict, row: int, positions: list[int], first_layer: int) -> dict:
    """Per layer: all heads' weights on the shown positions, and the keep mask there."""
    n_layers, n_heads = spec["n_layers"], spec["n_heads"]
    idx = np.asarray(positions, dtype=np.int64)
    layers = chosen_layers(n_layers, n_heads * len(idx) ** 2, first_layer)
    out = {"positions": list(positions), "layers": [], "omitted": [i for i in range(n_layers) if i not in layers]}
    keep_by_window: dict = {}
    windows = (trace.meta.get("mask") or {}).get("windows") or {}
    for layer in layers:
        name = f"blocks.{layer}.attn.weights"
        entry: dict = {"layer": layer, "step": name}
        if name not in trace or not trace.step(name).kept:
            entry["missing"] = (f"{name} is not in this trace" if name not in trace
                                else f"{name} was kept as statistics only; add --keep '{name}'")
            out["layers"].append(entry)
            continue
        w = trace.step(name).array[row][:, idx][:, :, idx]  # [heads, shown, shown]
        window = windows.get(str(layer))
        if window not in keep_by_window:
            keep_by_window[window] = np.asarray(mask_report(trace, spec, row, layer)["grids"].get(
                "keep", np.ones((trace.step(name).shape[-2], trace.step(name).shape[-1]), dtype=bool).tolist()), dtype=bool)
        keep = keep_by_window[window][idx][:, idx]  # [shown, shown]
        entry["heads"] = [{"head": h, "weights": np.round(w[h].astype(np.float64), 6).tolist()} for h in range(w.shape[0])]
        entry["blocked"] = (~keep).tolist()
        out["layers"].append(entry)
    return out


def add_page_data(report: dict, trace, model=None, vocab=None, target_id: int | None = None) -> dict:
    """The report plus `attention_layers` and `lens_grid`, for the sections the report has."""
    meta = trace.meta
    spec = meta["model"]["spec"]
    row = report.get("batch_row", 0)
    n = len(report.get("tokens") or [])
    positions = shown_positions(n, focus_position(report), side_for(spec["n_heads"]))
    report["page_positions"] = positions
    sections = report.get("sections") or []
    if "attention" in sections and n:
        first = (report.get("attention") or {}).get("layer", spec["n_layers"] - 1)
        report["attention_layers"] = attention_layers(trace, spec, row, positions, first)
    if "lens" in sections and n and vocab is not None:
        real = [p for p in positions if not report["tokens"][p].get("pad")]
        report["lens_grid"] = lens_grid(trace, model, row, real, vocab, target_id)
    return report
