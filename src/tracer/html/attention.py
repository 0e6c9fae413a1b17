"""Attention: per layer, one heatmap per head (query rows x key columns), token labels, the weight on hover."""

from __future__ import annotations

from tracer.html.common import esc, fmt
from tracer.html.heatmap import heatmap_svg, legend

GAMMA = 0.5  # colour = sqrt(weight): long rows spread thin weights that a linear scale leaves white
OPEN_ALL_UP_TO = 4000  # cells: small pages open every layer, larger ones only the layer in focus


def _labels(report: dict, positions: list[int]) -> list[str]:
    tokens = report.get("tokens") or []
    return [tokens[p]["token"] if p < len(tokens) else "" for p in positions]


def head_map(layer: int, head: dict, blocked, labels: list[str], positions: list[int], kv_head: int | None) -> str:
    w = head["weights"]
    values = [[None if blocked and blocked[r][c] else w[r][c] for c in range(len(w[r]))] for r in range(len(w))]

    def tip(r, c, v):
        where = f"q {positions[r]} {labels[r]} → k {positions[c]} {labels[c]}"
        return f"{where}: blocked" if v is None else f"{where}: {v:.4f}"

    svg = heatmap_svg(values, labels, labels, tip=tip, row_index=positions, col_index=positions,
                      caption=f"layer {layer} head {head['head']}",
                      cell_text=lambda r, c, v: f"{v:.2f}", gamma=GAMMA,
                      attrs={"data-layer": layer, "data-head": head["head"], "data-q": len(w), "data-k": len(w[0]) if w else 0})
    kv = f" · kv head {kv_head}" if kv_head is not None else ""
    return f'<div class="head"><div class="label">head {head["head"]}{kv}</div>{svg}</div>'


def layer_block(report: dict, entry: dict, positions: list[int], opened: bool, group: int) -> str:
    layer = entry["layer"]
    if entry.get("missing"):
        return f'<details class="layer"><summary>layer {layer}</summary><p class="note">{esc(entry["missing"])}</p></details>'
    labels = _labels(report, positions)
    maps = "".join(head_map(layer, h, entry.get("blocked"), labels, positions, h["head"] // group if group > 1 else None)
                   for h in entry["heads"])
    return (f'<details class="layer"{" open" if opened else ""}><summary>layer {layer} · {len(entry["heads"])} heads · '
            f'<span class="mono dim">{esc(entry["step"])}</span></summary><div class="body readable">'
            f'<div class="readout">hover a cell for its weight</div><div class="heads">{maps}</div></div></details>')


def section(report: dict):
    layers = report.get("attention_layers")
    att = report.get("attention") or {}
    if layers is None and not att:
        return None
    n_heads, n_kv = att.get("n_heads", 1), att.get("n_kv_heads", 1) or 1
    group = max(1, n_heads // n_kv)
    intro = ('<p class="note">Each heatmap is one head: row = query position (who is reading), column = key position '
             '(what it reads); colour = softmax weight, each real row sums to 1. Grey cells are blocked by the mask. '
             'Hover a cell for its value.</p>' + legend(1.0, "attention weight", GAMMA))
    if layers is None:  # a report from the screen only: its one layer
        if att.get("missing"):
            return "attention", intro + f'<p class="note">{esc(att["missing"])}</p>'
        positions = list(range(len(att["heads"][0]["weights"]))) if att.get("heads") else []
        return "attention", intro + layer_block(report, dict(att, step=att.get("step", "")), positions, True, group)
    positions = layers["positions"]
    cells = sum(len(e.get("heads", [])) for e in layers["layers"]) * len(positions) ** 2
    focus = att.get("layer")
    notes = []
    n_tokens = len(report.get("tokens") or [])
    if len(positions) < n_tokens:
        notes.append(f"{n_tokens} positions: showing {len(positions)} of them (the first few and a window ending at "
                     f"position {positions[-1]}); dotted lines mark skipped positions")
    if layers.get("omitted"):
        notes.append(f"layers {', '.join(map(str, layers['omitted']))} are left out to keep the page small "
                     "(tracer run --layer N --json has any layer in full)")
    if att.get("rows_sum_to_one") is False:
        notes.append(f"rows of layer {focus} do not sum to 1 (max error {fmt(att.get('max_row_error'))})")
    note = "".join(f'<p class="note warn">{esc(n)}</p>' for n in notes)
    blocks = "".join(layer_block(report, e, positions, cells <= OPEN_ALL_UP_TO or e["layer"] == focus, group)
                     for e in layers["layers"])
    return "attention", intro + note + blocks
