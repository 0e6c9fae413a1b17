"""`tracer run --json`: the report for programs, windowed on long inputs as the screen is.

The grids of the attention and mask sections grow with the square of the input (300 tokens gave 10 MB,
900 tokens 92 MB and 12.6 s). By default they hold a window of JSON_WINDOW query positions and
JSON_WINDOW key positions: the first position and a run around the focus (`--position`, by default the
last real token), chosen by the same rule as the screen's window (tracer.render.window) but with a fixed
size, so the output does not depend on the terminal. `json_window` in each section names the positions kept
(`queries`, `keys`, as absolute positions) and the full size (`of`); rows of `weights` keep their
`row_sums` over every key. `--json-full` keeps every position.

Also here: the whole pooled vector of every row (the screen shows its first and last values only).
"""

from __future__ import annotations

JSON_WINDOW = 64  # positions per axis of a windowed grid: 64 x 64 x heads numbers per section at most


def run_json(report: dict, trace, full: bool = False) -> dict:
    """The JSON document of a run: the report (windowed unless `full`) and the pooled vectors."""
    from tracer.report import json_view

    out = dict(report)
    if not full:
        focus = report.get("position")
        for key in ("attention", "mask", "cross_mask"):
            if isinstance(out.get(key), dict):
                out[key] = window_section(out[key], focus, key == "cross_mask" or out[key].get("part") == "cross_attn")
    if isinstance(out.get("pooled"), dict):
        out["pooled"] = dict(out["pooled"], **pooled_vectors(trace, out["pooled"].get("step", "pooled")))
    return json_view(out)


def window_positions(n: int, focus: int | None, budget: int = JSON_WINDOW) -> list[int]:
    from tracer.render.window import GAP, window

    return [p for p in window(n, n - 1 if focus is None else focus, budget) if p is not GAP]


def window_section(section: dict, focus: int | None, cross: bool) -> dict:
    """One attention or mask section with its [query][key] grids cut to the window (unchanged when it fits)."""
    shape = grid_shape(section)
    if shape is None:
        return section
    n_q, n_k = shape
    if n_q <= JSON_WINDOW and n_k <= JSON_WINDOW:
        return section
    q_focus = section.get("focus", focus)
    rows = window_positions(n_q, q_focus)
    cols = window_positions(n_k, None if cross else q_focus)

    def cut(grid):
        return [[grid[q][k] for k in cols] for q in rows]

    out = dict(section, json_window={"queries": rows, "keys": cols, "of": [n_q, n_k], "full": False,
                                "note": f"a window of the [{n_q}, {n_k}] grids; --json-full gives all"})
    if "heads" in out:
        out["heads"] = [dict(h, weights=cut(h["weights"]), row_sums=[h["row_sums"][q] for q in rows])
                        if "weights" in h else h for h in out["heads"]]
    if isinstance(out.get("blocked"), list):
        out["blocked"] = cut(out["blocked"])
    if isinstance(out.get("grids"), dict):
        out["grids"] = {k: cut(g) for k, g in out["grids"].items()}
    return out


def grid_shape(section: dict) -> tuple[int, int] | None:
    """(queries, keys) of the section's grids, or None when it has none."""
    grids = [h["weights"] for h in section.get("heads") or [] if "weights" in h]
    grids += list((section.get("grids") or {}).values())
    if isinstance(section.get("blocked"), list):
        grids.append(section["blocked"])
    for g in grids:
        if isinstance(g, list) and g and isinstance(g[0], list):
            return len(g), len(g[0])
    return None


def pooled_vectors(trace, step: str) -> dict:
    """The pooled sentence vector of every batch row, whole, when the trace kept it."""
    if step not in trace or not trace.step(step).kept:
        return {"vectors": None, "vectors_note": f"{step} was not kept (--keep)"}
    arr = trace.step(step).array  # [batch, d_model]
    return {"vectors": [[float(x) for x in row] for row in arr.reshape(arr.shape[0], -1)]}
