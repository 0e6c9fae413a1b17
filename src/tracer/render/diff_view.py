"""`tracer diff` for people: the verdict first, then the first divergence, the per-block error profile, the table."""

from __future__ import annotations

import math
import re

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from tracer.diff.compare import DiffReport, StepDiff
from tracer.diff.inputs import said_token
from tracer.diff.profile import BlockProfile
from tracer.render.diff_numbers import error_column, fmt, fmt_cos, fmt_db, fmt_gain, prob_change_format
from tracer.render.diff_numbers import shape_text as _shape
from tracer.render.theme import CAUTION

# The bar of the error profile spans float32 rounding (about -140 dB) to a 100% error (0 dB).
BAR_FLOOR_DB = -160.0
BAR_WIDTH = 16


class DiffScreen:
    """The whole diff screen; the tables take the width they are given."""

    def __init__(self, report: DiffReport, show_all: bool = False):
        self.report, self.show_all = report, show_all

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        report, show_all, width = self.report, self.show_all, options.max_width
        inputs = report.extras.get("inputs")
        if inputs is not None:
            yield inputs_view(report, inputs)
        yield verdict(report)
        if "conversion" in report.extras:
            yield conversion_line(report.extras["conversion"])
        yield Text(f"  {report.ref_label}  →  {report.mine_label}    atol {report.atol:g}, rtol {report.rtol:g}", style="dim")
        for note in report.notes:
            yield Text(f"  note: {note}", style="dim")
        for w in report.extras.get("warnings") or ():
            label = report.ref_label if w["side"] == "reference" else report.mine_label
            yield Text(f"  warning ({w['side']}, {label}): {w['message']}", style=CAUTION)
        if report.extras.get("expert_choice"):
            yield Text("")
            yield expert_choice_line(report.extras["expert_choice"])
        first = report.first_divergence
        if first is not None:
            yield Text("")
            yield first_divergence(report, first)
        if "generation" in report.extras:
            yield Text("")
            yield generation_summary_view(report.extras["generation"])
        if "names" in report.extras:
            yield Text("")
            yield name_map_summary(report.extras["names"])
        if report.blocks:
            yield Text("")
            yield profile_table(report.blocks, width)
        dist = distribution_summary(report)
        if dist is not None:
            yield Text("")
            yield dist
        if "weights" in report.extras:
            yield Text("")
            yield weights_summary(report.extras["weights"])
        if report.extras.get("moved_tokens"):
            yield Text("")
            yield moved_tokens_view(report.extras["moved_tokens"])
        only = one_sided(report)
        if only is not None:
            yield Text("")
            yield only
        yield Text("")
        yield steps_table(report, show_all, width)


# ---------- verdict and first divergence ----------


def generation_summary_view(g: dict) -> Group:
    """Two generation traces: the first decoding step that diverges, and the first step choosing another token."""
    lines = [Text("Generation", style="bold")]
    if g["first_step"] is None:
        lines.append(Text("  every compared step of every decoding step is within tolerance"))
    else:
        t = g["first_decode_step"]
        where = "step 0 (the prefill)" if t == 0 else f"decoding step {t}"
        lines.append(Text.assemble("  first diverging step: ", (where, "bold red"), f", at {g['first_step']}"))
    tok = g.get("first_token_step")
    if tok is not None:
        lines.append(Text(f"  tokens part at step {tok['t']} (row {tok['row']}): ref {tok['ref']}, mine {tok['mine']}"))
    elif g["steps"][0] is not None and g["steps"][1] is not None:
        lines.append(Text(f"  the same tokens on every row ({g['steps'][0]} and {g['steps'][1]} steps)", style="dim"))
    return Group(*lines)


def expert_choice_line(c: dict) -> Text:
    """MoE: the first token routed to other experts, said before any number."""
    t = Text("⚑ ROUTED DIFFERENTLY", style="bold red")
    t.append(f"  first at block {c['block']}, row {c['row']}, position {c['pos']}: "
             f"experts {c['ref']} in the reference, {c['mine']} in mine", style="red")
    t.append(f"  ({c['tokens_rerouted']} token(s) rerouted in that block)", style="dim")
    return t


def verdict(report: DiffReport) -> Text:
    compared = report.compared
    first = report.first_divergence
    if first is None:
        if not compared:
            return Text("? NOTHING COMPARED: no step has a tensor on both sides", style="bold yellow")
        t = Text("✓ MATCH", style="bold green")
        where = " on the shared positions" if "inputs" in report.extras else ""
        t.append(f"  all {len(compared)} compared steps are within tolerance{where}", style="green")
        return t
    failed = sum(1 for s in report.steps if s.failed)
    t = Text("✗ DIVERGED", style="bold red")
    t.append(f"  first at {first.name} ({first.reason})", style="red")
    t.append(f"; {failed} of {len(compared) + _failed_uncompared(report)} steps fail", style="red")
    return t


def inputs_view(report: DiffReport, inputs: dict) -> Group:
    """Said first: the two runs read different tokens, so only their shared prefix is compared."""
    n = inputs["compared_positions"]
    where = "position 0" if n == 1 else f"positions 0–{n - 1}"
    return Group(
        *_inputs_lines(inputs, report.ref_label, report.mine_label),
        Text(f"  Compared below: only {where}, where both read the same tokens (a causal model's position sees "
             "nothing after it). Every later position differs because the input does.", style="dim"),
        Text(""),
    )


def tokens_view(inputs: dict, ref_label: str, mine_label: str) -> Group:
    """Two models that split TEXT apart from the start: the tokens side by side, nothing else (exit status 1)."""
    return Group(
        *_inputs_lines(inputs, f"A {ref_label}", f"B {mine_label}"),
        Text(f"  Nothing is compared: {inputs.get('why', 'no position reads the same tokens')}. Compare the "
             "computation alone with --same-ids (both run on A's tokens); exit status 1.", style="dim"),
    )


def _inputs_lines(inputs: dict, ref_label: str, mine_label: str) -> list:
    """The heading, what each side ran, and where their tokens part."""
    return [Text("≠ THE INPUTS DIFFER", style="bold yellow"), Text(f"  {ref_label} ran {inputs['ref']}"),
            Text(f"  {mine_label} ran {inputs['mine']}"), *_token_lines(inputs)]


def _token_lines(inputs: dict) -> list:
    t = inputs.get("tokens")
    if not t:
        return []
    row = f"row {t['row']}, " if t["row"] else ""
    lines = [Text(f"  first different token: {row}position {t['pos']}: A {said_token(t['ref'], quoted=False)}, "
                  f"B {said_token(t['mine'], quoted=False)}", style="yellow")]
    lines += [Text(f"  {p}", style="yellow") for p in t["policy"]]
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_header=False)
    table.add_column("", style="dim")
    for cell in t["window"]:
        table.add_column(str(cell["pos"]), justify="center")
    table.add_row("pos", *[str(c["pos"]) for c in t["window"]])
    for side in ("ref", "mine"):
        cells = []
        for c in t["window"]:
            tok, other = c[side], c["mine" if side == "ref" else "ref"]
            piece = "·" if tok is None else tok["piece"]
            differs = tok is None or other is None or tok["id"] != other["id"]
            cells.append(Text(piece, style="bold yellow" if differs else ""))
        table.add_row("A" if side == "ref" else "B", *cells)
    lines.append(Padding(table, (0, 0, 0, 2)))
    return lines


def _failed_uncompared(report: DiffReport) -> int:
    return sum(1 for s in report.steps if s.failed and s.status not in ("pass", "fail"))


def first_divergence(report: DiffReport, s: StepDiff) -> Group:
    lines = [Text.assemble(("First divergence: ", "bold"), (s.name, "bold red"), f"  [{s.reason}]")]
    lines.append(Text(f"  {s.detail}"))
    if s.note:
        lines.append(Text(f"  why: {s.note}", style="bold yellow"))
    if s.ref_shape is not None or s.mine_shape is not None:
        lines.append(Text(f"  shape ref {_shape(s.ref_shape)} {s.ref_dtype or ''}, mine {_shape(s.mine_shape)} {s.mine_dtype or ''}", style="dim"))
    if "cosine" in s.metrics:
        m = s.metrics
        lines.append(Text(f"  max abs {fmt(m['max_abs'])} · mean abs {fmt(m['mean_abs'])} · max rel {fmt(m['max_rel'])} · "
                          f"cosine {fmt_cos(m['cosine'])} · NMSE {fmt_db(m['nmse_db'])}"))
    if s.growth_db == math.inf:
        lines.append(Text("  the error starts here: every input of this step matched exactly", style="yellow"))
    elif s.growth_db is not None:
        lines.append(Text(f"  error {fmt_gain(s.growth_db)} over its inputs' (inherited NMSE {fmt_db(s.inherited_db)})", style="yellow"))
    index = report.steps.index(s)
    before = report.steps[:index]
    passed = sum(1 for p in before if p.status == "pass")
    lines.append(Text(f"  before it: {passed} steps pass, {len(before) - passed} not compared", style="dim"))
    return Group(*lines)


# ---------- per-block profile ----------


def profile_table(blocks: list[BlockProfile], width: int = 120) -> Table:
    """One row per block: error entering (inherited), what attention and the MLP add, error leaving.

    Below 80 columns the two sublayers fold into one "adds" column."""
    narrow = width < 80
    names = [b.first_failure or (f"(grew most: {b.worst_step})" if b.worst_step else "") for b in blocks]
    fixed = (5 + 8 + (7 if narrow else 9 + 8) + 7) + max([len("first failure / grew most"), *map(len, names)])
    fixed += 2 * (5 if narrow else 6)  # the gaps between columns, the bar's included
    bar_width = max(0, min(BAR_WIDTH, width - fixed))  # the names stay whole; the bar gives way
    table = Table(title="Error by block (NMSE of the residual stream in dB; lower is closer)", title_justify="left",
                  title_style="bold", box=None, pad_edge=False, padding=(0, 1))
    table.add_column("block", justify="right")
    table.add_column("entering", justify="right")
    if narrow:
        table.add_column("adds", justify="right", no_wrap=True)
    else:
        table.add_column("attn adds", justify="right", no_wrap=True)
        table.add_column("mlp adds", justify="right", no_wrap=True)
    table.add_column("leaving", justify="right")
    if bar_width >= 4:
        table.add_column("", no_wrap=True, max_width=bar_width)
    table.add_column("first failure / grew most", no_wrap=True)
    for b in blocks:
        where = b.first_failure or ""
        if not where and b.worst_step:
            where = f"(grew most: {b.worst_step})"
        style = "red" if b.first_failure else ("yellow" if b.introduced else "")
        adds = [fmt_gain(b.gain_db)] if narrow else [fmt_gain(b.attn_gain_db), fmt_gain(b.mlp_gain_db)]
        shown_bar = [bar(b.output_db, bar_width)] if bar_width >= 4 else []
        table.add_row(str(b.block), fmt_db(b.input_db), *adds, fmt_db(b.output_db), *shown_bar, escape(where), style=style)
    return table


def bar(db: float | None, width: int = BAR_WIDTH) -> str:
    if db is None:
        return ""
    if db == -math.inf:
        return "·"
    if math.isnan(db):
        return "?"  # a NaN error: the dB column next to it says nan
    filled = max(1, min(width, round((db - BAR_FLOOR_DB) / -BAR_FLOOR_DB * width)))
    return "█" * filled


# ---------- logits / probs ----------


def distribution_summary(report: DiffReport) -> Group | None:
    rows = [s for s in report.steps if s.distribution]
    if not rows:
        return None
    lines = [Text("Next-token distributions", style="bold")]
    for s in rows:
        d = s.distribution
        agree = round(d["top1_agreement"] * d["positions"])
        lines.append(Text(
            f"  {s.name}: KL(ref‖mine) mean {fmt(d['kl_ref_mine']['mean'])} max {fmt(d['kl_ref_mine']['max'])} · "
            f"KL(mine‖ref) mean {fmt(d['kl_mine_ref']['mean'])} max {fmt(d['kl_mine_ref']['max'])}"))
        lines.append(Text(f"    top-1 agrees at {agree}/{d['positions']} positions · "
                          f"top-{d['k']} overlap {d['topk_overlap']:.2f} (mean over positions)"))
        flips = [p for p in d["per_position"] if not p["top1_agree"]][:5]
        for p in flips:
            where = ", ".join(f"{k}={v}" for k, v in p.items() if k not in _POSITION_METRICS)
            ref_token, mine_token = _token(p, "ref"), _token(p, "mine")
            lines.append(Text(f"    top-1 differs at {where}: ref {ref_token}, mine {mine_token} "
                              f"(KL {fmt(p['kl_ref_mine'])})", style="yellow"))
    return Group(*lines)


_POSITION_METRICS = {"kl_ref_mine", "kl_mine_ref", "top1_ref", "top1_mine", "top1_agree", "topk_overlap",
                     "top1_ref_piece", "top1_mine_piece"}


def _token(position: dict, side: str) -> str:
    piece = position.get(f"top1_{side}_piece")
    return f"{piece} (id {position[f'top1_{side}']})" if piece is not None else str(position[f"top1_{side}"])


# ---------- folders: weights and moved tokens ----------


def conversion_line(c: dict) -> Text:
    """A GGUF against its folder: quantization error, or the fault and the first step that reads it."""
    mark, style = ("✓", "bold green") if c["passed"] else ("✗", "bold red")
    t = Text(f"{mark} CONVERSION  ", style=style)
    t.append(c["line"], style="green" if c["passed"] else "red")
    if c["passed"] and c.get("quantized"):
        t.append("; the steps below differ by that rounding, and the exit status follows this verdict", style="dim")
    return t


QUANT_SHOWN = 8


def quantization_table(tensors: list[dict]) -> Group:
    """Per converted tensor: its error against the error its type is expected to give, and the verdict."""
    judged = [t for t in tensors if t.get("quant")]
    worst = sorted(judged, key=lambda t: (t["quant"]["verdict"] not in ("structural", "changed"),
                                           -(t["quant"]["rel_rms"] / t["quant"]["expected"] if t["quant"]["expected"]
                                             else float("inf"))))
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_header=True)
    for col, justify in (("tensor", "left"), ("type", "left"), ("max|Δ|", "right"), ("rel RMS", "right"),
                         ("expected", "right"), ("verdict", "left")):
        table.add_column(col, justify=justify, overflow="fold" if col == "tensor" else "ellipsis")
    for t in worst[:QUANT_SHOWN]:
        q = t["quant"]
        word = q["verdict"] if q["verdict"] != "structural" else f"structural: {q['fault']} {q['detail']}".strip()
        style = "red" if q["verdict"] in ("structural", "changed") else ""
        table.add_row(escape(t["name"]), q["qtype"], fmt(q["max_abs"]), fmt(q["rel_rms"]), fmt(q["expected"]),
                      Text(word, style=style))
    lines = [Text.assemble(("Quantization", "bold"), f": {len(judged)} tensors differ from the folder's; the worst "
                                                    "against the error their type is expected to give")]
    lines.append(table)
    if len(worst) > QUANT_SHOWN:
        lines.append(Text(f"  ⋮ {len(worst) - QUANT_SHOWN} more (--json lists them all)", style="dim"))
    return Group(*lines)


def weights_summary(w: dict) -> Group:
    changed = [t for t in w["tensors"] if t["status"] != "same"]
    lines = [Text.assemble(("Weights", "bold"), f": {len(changed)} of {len(w['tensors'])} tensors differ")]
    if not changed:
        return Group(*lines)
    if any(t.get("quant") for t in changed):
        return Group(*lines, quantization_table(changed))
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_header=True)
    table.add_column("layer", justify="right")
    table.add_column("rel change", justify="right")
    table.add_column("tensors changed", justify="right")
    table.add_column("most changed", overflow="fold")
    for layer in [r for r in w["layers"] if r["changed"]][:8]:
        name = "other" if layer["layer"] is None else str(layer["layer"])
        table.add_row(name, fmt(layer["rel_change"]) if layer["rel_change"] is not None else "structure",
                      f"{layer['changed']}/{layer['tensors']}", escape(layer["most_changed"] or ""))
    lines.append(table)
    return Group(*lines)


def moved_tokens_view(rows: list[dict]) -> Group:
    lines = [Text("Final distribution: tokens that moved most", style="bold")]
    for row in rows:
        if not any(t["delta"] for t in row["moved"]):
            lines.append(Text(f"  row {row['batch']}, pos {row['pos']}: no token's probability moved"))
            continue
        lines.append(Text(f"  row {row['batch']}, pos {row['pos']}:"))
        table = Table(box=None, pad_edge=False, padding=(0, 1), show_header=True, header_style="dim")
        for header in ("token", "id", "ref", "mine", "change"):
            table.add_column(header, justify="left" if header == "token" else "right", no_wrap=True)
        fmt_p = prob_change_format([v for t in row["moved"] for v in (t["ref"], t["mine"])])
        fmt_d = prob_change_format([t["delta"] for t in row["moved"]], signed=True)
        for t in row["moved"]:
            table.add_row(t.get("piece", ""), str(t["id"]), fmt_p(t["ref"]), fmt_p(t["mine"]), fmt_d(t["delta"]))
        lines.append(Padding(table, (0, 0, 0, 4)))
    return Group(*lines)


# ---------- names, one-sided steps, the table ----------


def name_map_summary(names: dict) -> Text:
    t = Text.assemble(("Name map ", "bold"), (names["map"], "bold"), f" on {names['applied_to']}: ",
                      f"{len(names['renamed'])} renamed or rearranged, {len(names['ignored'])} ignored, "
                      f"{len(names['unmatched'])} unmatched")
    layouts = sorted({r["layout"] for r in names["renamed"] if r["layout"]})
    for note in layouts[:6]:
        t.append(f"\n  layout: {note}", style="dim")
    if names["unmatched"]:
        t.append("\n  unmatched (kept under their own names): " + ", ".join(group_names(names["unmatched"])[:8]), style="dim")
    return t


def one_sided(report: DiffReport) -> Text | None:
    only_ref = [s.name for s in report.steps if s.mine_shape is None and s.ref_shape is not None]
    only_mine = [s.name for s in report.steps if s.ref_shape is None and s.mine_shape is not None]
    if not only_ref and not only_mine:
        return None
    t = Text()
    if only_ref:
        t.append(f"Only in {report.ref_label} ({len(only_ref)}): ", style="bold")
        t.append(", ".join(group_names(only_ref)))
    if only_mine:
        if only_ref:
            t.append("\n")
        t.append(f"Only in {report.mine_label} ({len(only_mine)}): ", style="bold")
        t.append(", ".join(group_names(only_mine)))
    return t


def group_names(names: list[str]) -> list[str]:
    """`blocks.0.attn.q_rot, blocks.1.attn.q_rot` -> `blocks.{0..1}.attn.q_rot`, in first-seen order."""
    groups: dict[str, list[int]] = {}
    for name in names:
        m = re.search(r"\.(\d+)\.", name)
        template = name if m is None else name[: m.start()] + ".{i}." + name[m.end() :]
        groups.setdefault(template, []).append(int(m.group(1)) if m else -1)
    out = []
    for template, indices in groups.items():
        if len(indices) == 1:
            out.append(template.replace("{i}", str(indices[0])))
        elif indices == list(range(indices[0], indices[0] + len(indices))):
            out.append(template.replace("{i}", f"{{{indices[0]}..{indices[-1]}}}"))
        else:
            out.append(template.replace("{i}", "{" + ",".join(map(str, indices)) + "}"))
    return out


def table_rows(report: DiffReport, show_all: bool) -> list[StepDiff]:
    """Everything with --all; otherwise top-level steps, each block's resid_post and the whole first failing block."""
    if show_all:
        return report.steps
    first = report.first_divergence
    focus = first.block if first is not None else None
    rows = []
    for s in report.steps:
        b = s.block
        if b is None or b == focus or s.name.endswith(".resid_post") or s is first:
            rows.append(s)
    return rows


# (header, cell) per column, widest terminals first; narrower terminals drop from the right of this list
_COLUMNS = (
    ("NMSE dB", lambda s: fmt_db(s.metrics.get("nmse_db"))),
    ("growth", lambda s: fmt_gain(s.growth_db)),
    ("max abs", lambda s: fmt(s.metrics.get("max_abs"))),
    ("cosine", lambda s: fmt_cos(s.metrics.get("cosine"))),
    ("max rel", lambda s: fmt(s.metrics.get("max_rel"))),
    ("shape", lambda s: _shape(s.ref_shape if s.ref_shape is not None else s.mine_shape)),
)


_WIDTHS = {"NMSE dB": 8, "growth": 9, "max abs": 9, "cosine": 10, "max rel": 9, "shape": 18}


def columns_for(width: int, used: int = 40) -> list[str]:
    """The metric columns that fit next to `used` cells (step name and status), in _COLUMNS order; at least
    NMSE and growth. Step names are never wrapped: narrower terminals drop columns instead."""
    chosen, room = [], width - used
    for header, _ in _COLUMNS:
        w = _WIDTHS[header] + 1
        if len(chosen) >= 2 and w > room:
            break
        chosen.append(header)
        room -= w
    return chosen


def steps_table(report: DiffReport, show_all: bool, width: int = 120) -> Table:
    rows = table_rows(report, show_all)
    hidden = len(report.steps) - len(rows)
    caption = f"{hidden} steps hidden (--all shows every step)" if hidden else None
    table = Table(title="Steps", title_justify="left", title_style="bold", caption=caption, caption_justify="left",
                  caption_style="dim", box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    table.add_column("step", no_wrap=True)
    table.add_column("", no_wrap=True)
    used = max((len(s.name) for s in rows), default=4) + 1 + max((status_cell(s)[0].cell_len for s in rows), default=2) + 1
    shown = [(h, cell) for h, cell in _COLUMNS if h in columns_for(width, used)]
    for header, _ in shown:
        table.add_column(header, justify="left" if header == "shape" else "right", no_wrap=header != "shape")
    column_fmt = {m: error_column([s.metrics.get(key) for s in rows])
                  for m, key in (("max abs", "max_abs"), ("max rel", "max_rel"))}
    for s in rows:
        cells = [column_fmt[h](s.metrics.get("max_abs" if h == "max abs" else "max_rel")) if h in column_fmt else cell(s)
                 for h, cell in shown]
        table.add_row(escape(s.name), *status_cell(s), *cells)
    return table


def status_cell(s: StepDiff) -> tuple[Text]:
    styles = {"pass": ("ok", "green"), "missing": ("only ref", "dim"), "extra": ("only mine", "dim"),
              "stats-only": ("stats", "dim")}
    if s.status == "fail":
        return (Text(f"FAIL {s.reason}", style="bold red"),)
    label, style = styles.get(s.status, (s.status, ""))
    return (Text(label, style=style),)
