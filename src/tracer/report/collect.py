"""What the page shows beyond the screen's report: every layer's attention and the lens over positions.

The screen shows one layer and one position; a page has room for all of them,
within a budget so that long prompts and deep models still give a file a
browser opens quickly. Long prompts show a window of positions: the first few
(where attention often parks) and the ones up to the position in focus.
Encoder-decoder models get three views: encoder self-attention, decoder
self-attention and cross-attention (decoder rows over encoder columns).
"""

from __future__ import annotations

import math

import numpy as np

from tracer.report.distribution import vocab_entry
from tracer.report.generation import generation_view
from tracer.report.interactive import decode_rows, dist_data, row_data
from tracer.report.lens_grid import lens_grid
from tracer.report.mask import mask_report

MAX_SIDE = 48  # positions shown per heatmap axis
HEAD_POSITIONS = 4  # always shown at the start of a long prompt
MAX_CELLS = 40_000  # attention cells over all layers, heads and views (about 130 bytes each)


def vocab_from_trace(meta: dict):
    """id -> {piece, bytes, special} from the trace's own token table: without the tokenizer the page still names
    the tokens of the prompt; any other id is `id N` (never `<N>`, the notation for a raw byte)."""
    known = {}
    for row in (meta.get("tokens") or []) + (meta.get("decoder_tokens") or []):
        for t in row:
            known.setdefault(int(t["id"]), {"piece": t["piece"], "bytes": t.get("bytes", ""), "special": bool(t.get("special"))})
    return lambda i: known.get(int(i)) or {"piece": f"id {i}", "bytes": "", "special": False}


def shown_positions(n: int, focus: int, cap: int = MAX_SIDE) -> list[int]:
    """All positions when they fit; else the first few and a window ending at `focus` (absolute indices)."""
    if n <= cap:
        return list(range(n))
    width = cap - HEAD_POSITIONS
    start = min(max(HEAD_POSITIONS, focus - width + 1), n - width)
    return list(range(HEAD_POSITIONS)) + list(range(start, start + width))


def side_for(n_heads: int, budget: int = MAX_CELLS) -> int:
    """Positions per axis, so that one layer of all heads fits the cell budget (at least 16)."""
    return max(16, min(MAX_SIDE, math.isqrt(budget // max(1, n_heads))))


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


def last_real(tokens: list[dict]) -> int:
    real = [t["pos"] for t in tokens if not t.get("pad")]
    return real[-1] if real else 0


def focus_position(report: dict) -> int:
    """The output position (next token, fill-in); else the last real token of the rows the output reads."""
    dist = report.get("distribution") or report.get("lens") or {}
    if "position" in dist:
        return int(dist["position"])
    return last_real(report.get("decoder_tokens") or report.get("tokens") or [])


def attention_views(report: dict, spec: dict) -> list[dict]:
    """(stack, part) pairs the model has, with the token lists of their rows and columns."""
    if spec.get("route") != "encoder-decoder":
        return [{"stack": "", "part": "attn", "title": "", "rows": "tokens", "cols": "tokens", "spec": spec}]
    return [
        {"stack": "encoder", "part": "attn", "title": "encoder self-attention (bidirectional)", "rows": "tokens",
         "cols": "tokens", "spec": spec["encoder"]},
        {"stack": "decoder", "part": "attn", "title": "decoder self-attention (causal)", "rows": "decoder_tokens",
         "cols": "decoder_tokens", "spec": spec},
        {"stack": "decoder", "part": "cross_attn", "title": "cross-attention: decoder rows read encoder columns",
         "rows": "decoder_tokens", "cols": "tokens", "spec": spec},
    ]


def view_positions(report: dict, key: str, cap: int) -> list[int]:
    tokens = report.get(key) or []
    is_output = key == ("decoder_tokens" if report.get("decoder_tokens") else "tokens")
    return shown_positions(len(tokens), focus_position(report) if is_output else last_real(tokens), cap)


def attention_view(trace, spec: dict, row: int, view: dict, rows: list[int], cols: list[int], first: int,
                   budget: int) -> dict:
    """Per layer of one view: all heads' weights on the shown positions, and the keep mask there."""
    sspec, stack, part = view["spec"], view["stack"], view["part"]
    n_layers = sspec["n_layers"]
    ri, ci = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    layers = chosen_layers(n_layers, sspec["n_heads"] * len(ri) * len(ci), min(first, n_layers - 1), budget)
    out = {"stack": stack, "part": part, "title": view["title"], "rows": view["rows"], "cols": view["cols"],
           "row_positions": rows, "col_positions": cols, "layers": [],
           "omitted": [i for i in range(n_layers) if i not in layers]}
    keeps: dict = {}
    windows = (trace.meta.get("mask") or {}).get("windows") or {} if stack != "encoder" else {}
    for layer in layers:
        name = f"{stack + '.' if stack else ''}blocks.{layer}.{part}.weights"
        entry: dict = {"layer": layer, "step": name}
        if name not in trace or not trace.step(name).kept:
            entry["missing"] = (f"{name} is not in this trace" if name not in trace
                                else f"{name} was kept as statistics only; add --keep '{name}'")
            out["layers"].append(entry)
            continue
        w = trace.step(name).array[row][:, ri][:, :, ci]  # [heads, shown rows, shown cols]
        key = windows.get(str(layer)) if part == "attn" else None  # layers of one window share a mask
        if key not in keeps:
            grid = mask_report(trace, spec_of(trace), row, layer, stack, part)["grids"].get("keep")
            keeps[key] = np.asarray(grid, dtype=bool) if grid is not None else np.ones(trace.step(name).shape[-2:], bool)
        keep = keeps[key][ri][:, ci]  # [shown rows, shown cols]
        entry["heads"] = [{"head": h, "weights": np.round(w[h].astype(np.float64), 6).tolist()} for h in range(w.shape[0])]
        entry["blocked"] = (~keep).tolist()
        out["layers"].append(entry)
    return out


def spec_of(trace) -> dict:
    return trace.meta["model"]["spec"]


def add_page_data(report: dict, trace, model=None, vocab=None, target_id: int | None = None) -> dict:
    """The report plus `attention_maps` (one entry per attention view) and `lens_grid`, for its sections."""
    spec = spec_of(trace)
    row = report.get("batch_row", 0)
    sections = report.get("sections") or []
    views = attention_views(report, spec)
    budget = MAX_CELLS // len(views)
    cap = min(side_for(v["spec"]["n_heads"], budget) for v in views)
    out_key = "decoder_tokens" if report.get("decoder_tokens") else "tokens"
    report["page_positions"] = {key: view_positions(report, key, cap) for key in {"tokens", out_key}}
    if "attention" in sections and report.get("tokens"):
        first = (report.get("attention") or {}).get("layer", 10**9)
        report["attention_maps"] = [
            attention_view(trace, spec, row, v, report["page_positions"][v["rows"]], report["page_positions"][v["cols"]],
                           first, budget) for v in views]
    if "lens" in sections and vocab is not None and report.get(out_key):
        out_tokens = report[out_key]
        real = [p for p in report["page_positions"][out_key] if not out_tokens[p].get("pad")]
        report["lens_grid"] = lens_grid(trace, model, row, real, vocab, target_id, out_key)
    add_live_data(report, trace, spec, row, views, out_key, vocab)
    if trace.meta.get("generation"):  # a tracer generate --save trace: its steps and the KV cache
        name = (lambda i: vocab_entry(i, vocab)["token"]) if vocab else (lambda i: f"id {i}")
        layer = (report.get("attention") or {}).get("layer", spec["n_layers"] - 1)
        report["generation_view"] = generation_view(trace, row, layer, name, [t["token"] for t in report.get("tokens") or []])
        if report["generation_view"] and "generation" not in sections:
            report["sections"] = list(sections) + ["generation"]
        rows = report.get("live_rows")
        if report["generation_view"] and rows and rows.get("stack") == "":  # the new query rows against the cache
            rows["layers"] += decode_rows(trace, row, layer, len(report["tokens"]))
            rows["labels"] = report["generation_view"]["labels"]
    return report


def live_view(report: dict, trace, spec: dict, row: int, view: dict, out_key: str, att: dict) -> dict:
    """One attention view's held rows (see report.interactive.row_data), on the layers its heatmaps show."""
    maps = next((m for m in report.get("attention_maps") or [] if m["stack"] == view["stack"] and m["part"] == view["part"]), None)
    layers = [e["layer"] for e in maps["layers"]] if maps else list(range(view["spec"]["n_layers"]))
    held = report["page_positions"].get(view["rows"]) or view_positions(report, view["rows"], MAX_SIDE)
    tokens = report.get(view["rows"]) or []
    focus = focus_position(report) if view["rows"] == out_key else last_real(tokens)
    layer = att.get("layer") if att.get("layer") in layers else (layers[-1] if layers else 0)
    return row_data(trace, spec, row, view["stack"], layers, held, [t["token"] for t in tokens], layer,
                    focus if focus in held else held[-1], view["part"], [t["token"] for t in report.get(view["cols"]) or []])


def add_live_data(report: dict, trace, spec: dict, row: int, views: list[dict], out_key: str, vocab) -> None:
    """`live_rows` (the row by hand) and `live_dist` (the distribution under a temperature): see report.interactive."""
    sections = report.get("sections") or []
    if "attention" in sections and report.get("tokens"):
        att = report.get("attention") or {}
        # the panel opens on decoder self-attention (where the output is read); an encoder-decoder page also holds
        # the encoder's self-attention and the cross-attention rows (the page's `attn=` switch)
        first = next((v for v in views if v["part"] == "attn" and v["stack"] != "encoder"), views[0])
        rows_of = [live_view(report, trace, spec, row, v, out_key, att) for v in [first] + [v for v in views if v is not first]]
        report["live_rows"] = rows_of[0]
        if len(rows_of) > 1:
            report["live_row_views"] = rows_of[1:]
        if isinstance(att.get("selected"), int):  # --head H: the panel opens on that head
            report["live_rows"]["head"] = att["selected"]
    dist = report.get("distribution")
    if "top_k" in sections and dist and not dist.get("missing") and report.get(out_key):
        vocab = vocab or (lambda i: {"piece": f"id {i}", "bytes": "", "special": False})
        out_tokens = report[out_key]
        positions = sorted({p for p in report["page_positions"][out_key] if not out_tokens[p].get("pad")}
                           | {f["distribution"]["position"] for f in report.get("fills") or []} | {dist["position"]})
        target = (dist.get("target") or {}).get("id")
        report["live_dist"] = dist_data(trace, row, positions, dist["position"], len(report.get("top_k") or []) or 10,
                                        lambda i: vocab_entry(i, vocab)["token"], target, dist.get("kind", "next"))
