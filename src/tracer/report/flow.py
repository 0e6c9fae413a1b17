"""The shape flow: every step with its inputs, and which blocks the screen folds.

A Step does not record its inputs; they follow from the architecture (norm
placement, residual kind): arch.steps_of describes them for the spec in the
trace's metadata.
"""

from __future__ import annotations

from tracer.arch.spec import Spec
from tracer.arch.steps_of import pass_steps
from tracer.steps import block_of, matches, stack_of


def inputs_by_step(spec: Spec, present: set[str]) -> dict[str, list[str]]:
    """Per step name: the steps whose tensors it is computed from (those present in the trace), from the one
    description of the pass (arch.steps_of). Steps outside it (a generation's decode.{t}.*) have none."""
    return {s.name: [n for n in s.inputs if n in present] for s in pass_steps(spec)}


def kv_repeat(name: str, spec: dict) -> int | None:
    """Grouped-query attention: where each kv head is shared by `group` query heads (scores and z)."""
    heads, kv = spec.get("n_heads"), spec.get("n_kv_heads")
    if not heads or not kv or heads == kv:
        return None
    return heads // kv if name.endswith(("attn.scores", "attn.z")) else None


def step_records(trace, spec: dict) -> list[dict]:
    """Every step, JSON-ready: name, op, axes, shape, dtype, stats, inputs and their shapes."""
    present = set(trace.names())
    shapes = {s.name: list(s.shape) for s in trace.steps}
    inputs = inputs_by_step(Spec.from_dict(spec), present)
    out = []
    for s in trace.steps:
        ins = inputs.get(s.name, [])
        out.append({
            "name": s.name, "op": s.op, "axes": list(s.axes), "shape": list(s.shape), "dtype": s.dtype,
            "kept": s.kept, "stats": s.stats, "hf_module": s.hf_module, "block": block_of(s.name),
            "stack": stack_of(s.name),
            "inputs": [{"name": n, "shape": shapes[n]} for n in ins],
            "kv_repeat": kv_repeat(s.name, spec),
        })
    return out


MAX_FOLDED_ROWS = 8


def flow_plan(records: list[dict], globs: tuple[str, ...], all_steps: bool, layers: tuple[int, ...] | None) -> dict:
    """Which rows the screen shows: steps in full, and one summary row per folded block.

    Default: block 0 in full, later blocks folded to their resid_post. `layers` picks the
    blocks shown in full, `globs` shows only matching steps, `all_steps` unfolds everything.
    """
    if globs:
        chosen = [r for r in records if matches(r["name"], globs)]
        return {"mode": "filtered", "globs": list(globs), "rows": [{"kind": "step", **r} for r in chosen], "folded": []}
    blocks = sorted({r["block"] for r in records if r["block"] is not None})
    full = set(blocks) if all_steps else set(layers) if layers is not None else set(blocks[:1])
    rows, folded = [], []
    by_block: dict[tuple[str, int], list[dict]] = {}
    for r in records:
        b, stack = r["block"], r.get("stack", "")
        if b is None or b in full:
            rows.append({"kind": "step", **r})
            continue
        if (stack, b) not in by_block:
            by_block[(stack, b)] = []
            rows.append({"kind": "fold", "block": b, "stack": stack})
            folded.append(f"{stack}.{b}" if stack else b)
        by_block[(stack, b)].append(r)
    for row in rows:
        if row["kind"] == "fold":
            stack = row["stack"]
            reference = next((b for b in blocks if b in full), None)
            ref_shapes = [r["shape"] for r in records if r["block"] == reference and r.get("stack", "") == stack]
            row.update(_fold_summary(row["block"], by_block[(stack, row["block"])], ref_shapes, reference))
    rows = _cap_folded(rows)
    mode = "all" if all_steps else "layers" if layers is not None else "default"
    return {"mode": mode, "rows": rows, "folded": folded, "full_blocks": sorted(full)}


def _fold_summary(block: int, steps: list[dict], ref_shapes: list[list[int]], reference: int | None) -> dict:
    last = steps[-1]
    bad = [(s["name"], s["stats"].get("nan", 0), s["stats"].get("inf", 0)) for s in steps
           if s["stats"].get("nan", 0) or (s["stats"].get("inf", 0) and not s["name"].endswith("masked_scores"))]
    return {
        "n_steps": len(steps),
        "same_shapes": reference is not None and [s["shape"] for s in steps] == ref_shapes,
        "reference": reference,
        "last": last,
        "non_finite": [{"name": n, "nan": a, "inf": b} for n, a, b in bad],
    }


def _cap_folded(rows: list[dict]) -> list[dict]:
    """Many folded blocks: keep the first and last few summary rows and say how many were skipped."""
    folds = [i for i, r in enumerate(rows) if r["kind"] == "fold"]
    if len(folds) <= MAX_FOLDED_ROWS:
        return rows
    keep = set(folds[: MAX_FOLDED_ROWS // 2] + folds[-MAX_FOLDED_ROWS // 2 :])
    hidden = [rows[i]["block"] for i in folds if i not in keep]
    out, gap_done = [], False
    for i, r in enumerate(rows):
        if r["kind"] == "fold" and i not in keep:
            if not gap_done:
                out.append({"kind": "gap", "blocks": hidden})
                gap_done = True
            continue
        out.append(r)
    return out
