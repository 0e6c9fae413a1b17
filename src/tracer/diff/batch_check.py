"""`tracer run --check-batch`: each row of a padded batch equals its prompt run alone, step by step.

For each padding side the prompts run as one padded batch; every row is cut to its real positions along
each named position axis (pos, q_len, kv_len, enc_pos, dec_pos) and compared with the single-prompt run
by `compare` (tracer diff's rule and tolerances). The first step that differs is where padding leaks.

Families whose position ids ignore padding (BERT, BART: 0..n-1 whatever the padding, as transformers
computes them; mask lab warning ML012) give a left-padded row other position embeddings than the same
prompt alone: that side differs by design. It is reported as such, and held instead to equality with
positions counted from the mask (cumsum(mask) - 1), which is what shows nothing else leaks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from tracer.diff.compare import DEFAULT_ATOL, DEFAULT_RTOL, compare
from tracer.trace import Step, Trace

SIDES = ("left", "right")
LOGIT_STEPS = ("logits", "logits.raw", "probs")  # an encoder-decoder's head reads decoder positions


@dataclass
class Leak:
    """The first step where a batch row differs from its prompt alone."""

    row: int
    step: str
    reason: str | None
    max_abs: float | None
    detail: str
    note: str = ""

    def to_json(self) -> dict:
        return {"row": self.row, "step": self.step, "reason": self.reason, "max_abs": self.max_abs,
                "detail": self.detail, "note": self.note}


@dataclass
class SideVerdict:
    """One padding side: pass, fail (padding leaks) or by-design (positions ignore padding; `held` is the
    same side rerun with positions from the mask, which must pass)."""

    side: str
    status: str  # pass | fail | by-design
    rows: int
    steps: int  # steps compared per row
    padded_rows: int  # rows that carried padding on this side
    max_abs: float  # the largest |Δ| over every compared step and row
    leak: Leak | None = None
    held: "SideVerdict | None" = None

    @property
    def passed(self) -> bool:
        return self.status == "pass" or (self.status == "by-design" and self.held is not None and self.held.passed)

    def to_json(self) -> dict:
        out = {"side": self.side, "status": self.status, "passed": self.passed, "rows": self.rows,
               "steps": self.steps, "padded_rows": self.padded_rows, "max_abs": self.max_abs,
               "first_leak": self.leak.to_json() if self.leak else None}
        if self.status == "by-design":
            out["code"] = "ML012"
            out["positions_from_mask"] = self.held.to_json() if self.held else None
        return out


@dataclass
class BatchCheck:
    sides: list[SideVerdict]
    atol: float
    rtol: float
    position_rule: str  # the rule in force: "mask" (cumsum(mask) - 1) or "index" (0..n-1)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(s.passed for s in self.sides)

    def to_json(self) -> dict:
        return {"passed": self.passed, "atol": self.atol, "rtol": self.rtol, "position_rule": self.position_rule,
                "sides": [s.to_json() for s in self.sides], "notes": list(self.notes)}


def check_batch(model, text=None, ids=None, options=None, atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL,
                sides: tuple[str, ...] = SIDES) -> BatchCheck:
    """Run the prompts (text or id rows, at least two) as a padded batch on each side and each alone; compare."""
    from tracer.model.options import InputOptions

    options = options or InputOptions()
    n = len(text if text is not None else ids)
    singles = [model.run(text=None if text is None else [text[r]], ids=None if ids is None else [ids[r]],
                         options=row_options(options, r)) for r in range(n)]
    rule = position_rule(model.spec, options.positions)
    by_design = rule == "index" and (model.spec.encoder or model.spec).positions != "relative"
    verdicts = []
    for side in sides:
        batch = model.run(text=text, ids=ids, options=replace(options, pad_side=side))
        v = side_verdict(side, batch, singles, model.route, atol, rtol)
        if not v.passed and side == "left" and by_design and v.leak is not None:
            v.status = "by-design"
            again = model.run(text=text, ids=ids, options=replace(options, pad_side=side, positions="mask"))
            ref = [model.run(text=None if text is None else [text[r]], ids=None if ids is None else [ids[r]],
                             options=replace(row_options(options, r), positions="mask")) for r in range(n)]
            v.held = side_verdict(side, again, ref, model.route, atol, rtol)
        verdicts.append(v)
    notes = []
    if all(v.padded_rows == 0 for v in verdicts):
        notes.append("every prompt has the same length: no row is padded, so padding is not exercised")
    return BatchCheck(verdicts, atol, rtol, rule, notes)


def position_rule(spec, given: str) -> str:
    """The position rule in force: the one asked for, else the family's (the encoder's, for encoder-decoders)."""
    return given if given != "auto" else (spec.encoder or spec).position_rule


def row_options(options, r: int):
    """The input options of row r alone: per-row decoder inputs and token types narrowed to that row."""
    o = options
    if isinstance(o.decoder_text, tuple):
        o = replace(o, decoder_text=o.decoder_text[r])
    if o.decoder_ids is not None and o.decoder_ids and isinstance(o.decoder_ids[0], tuple):
        o = replace(o, decoder_ids=o.decoder_ids[r])
    if o.token_types is not None and len(o.token_types) > 1:
        o = replace(o, token_types=(o.token_types[r],))
    return o


def side_verdict(side: str, batch: Trace, singles: list[Trace], route: str, atol: float, rtol: float) -> SideVerdict:
    """Every row of `batch` against its single run; the leak named is the earliest step (in the pass's order)."""
    order = {name: i for i, name in enumerate(batch.names())}
    masks = stream_masks(batch)
    leaks, worst, steps, padded = [], 0.0, 0, 0
    for r, single in enumerate(singles):
        padded += int(not all(m[r].all() for m in masks.values()))
        report = compare(single, row_view(batch, r, masks, route), atol, rtol, missing_fails=True,
                         ref_label="alone", mine_label=f"row {r}")
        steps = max(steps, len(report.compared))
        worst = max([worst] + [float(s.metrics["max_abs"]) for s in report.compared if "max_abs" in s.metrics])
        first = report.first_divergence
        if first is not None:
            leaks.append(Leak(r, first.name, first.reason, first.metrics.get("max_abs"), first.detail, first.note))
    leak = min(leaks, key=lambda k: (order.get(k.step, len(order)), k.row)) if leaks else None
    return SideVerdict(side, "fail" if leak else "pass", len(singles), steps, padded, worst, leak)


def stream_masks(batch: Trace) -> dict[str, np.ndarray]:
    """bool [batch, pos] real positions of each stream: "enc" (input.mask) and "dec" (input.decoder_mask)."""
    enc = np.asarray(batch["input.mask"]) != 0
    dec = np.asarray(batch["input.decoder_mask"]) != 0 if "input.decoder_mask" in batch else enc
    return {"enc": enc, "dec": dec}


def axis_stream(name: str, axis: str, route: str) -> str | None:
    """Which stream's positions an axis of a step counts (None: not a position axis)."""
    if axis == "enc_pos":
        return "enc"
    if axis == "dec_pos":
        return "dec"
    if axis not in ("pos", "q_len", "kv_len"):
        return None
    if route != "encoder-decoder":
        return "enc"
    if axis == "kv_len" and ".cross_attn." in name:
        return "enc"
    return "dec" if name.startswith("decoder.") or name in LOGIT_STEPS else "enc"


def row_view(batch: Trace, r: int, masks: dict[str, np.ndarray], route: str) -> Trace:
    """Row r of a padded batch trace, cut to its real positions along every named position axis: the shapes
    of that prompt run alone. Steps kept as statistics only are left out (nothing to cut)."""
    n = masks["enc"].shape[0]
    steps = []
    for s in batch.steps:
        if s.array is None:
            continue
        a = np.asarray(s.array)
        if a.ndim and s.axes and s.axes[0] == "batch" and a.shape[0] == n:
            a = a[r:r + 1]  # a batch axis of 1 (T5's position bias) is shared by every row
        for axis, axis_name in enumerate(s.axes):
            stream = axis_stream(s.name, axis_name, route)
            if stream is not None and a.shape[axis] == masks[stream].shape[1]:
                a = np.take(a, np.flatnonzero(masks[stream][r]), axis=axis)
        cut = Step(s.name, s.axes, s.op, s.hf_module, tuple(a.shape), s.dtype, s.stats)
        cut.array = a
        steps.append(cut)
    return Trace(steps, dict(batch.meta))


def verdict_line(v: SideVerdict) -> str:
    """One line per side: what was compared and what was found."""
    what = f"{v.rows} rows × {v.steps} steps"
    if v.status == "pass":
        return (f"{v.side} padding: ✓ each row equals its prompt alone ({what}, {v.padded_rows} padded; "
                f"max |Δ| {v.max_abs:.3g})")
    k = v.leak
    where = f"{k.step} (row {k.row}{'' if k.max_abs is None else f', max |Δ| {k.max_abs:.3g}'})"
    if v.status == "by-design":
        held = v.held
        tail = ("with positions from the mask (--positions from-mask) every row equals its prompt alone ✓"
                if held.passed else f"✗ with positions from the mask too, padding leaks at {held.leak.step} "
                f"(row {held.leak.row}{'' if held.leak.max_abs is None else f', max |Δ| {held.leak.max_abs:.3g}'})")
        return (f"{v.side} padding: differs by design from {where}: position ids 0..n-1 ignore padding, so a "
                f"left-padded row reads other position embeddings than its prompt alone, as in transformers "
                f"(ML012); {tail}")
    return f"{v.side} padding: ✗ padding leaks at {where}: {k.detail} (indices as in the prompt alone)"
