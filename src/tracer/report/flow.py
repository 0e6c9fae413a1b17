"""The shape flow: every step with its inputs, and which blocks the screen folds.

A Step does not record its inputs; they follow from the architecture (norm
placement, residual kind), so they are derived here from the step names and
the spec in the trace's metadata.
"""

from __future__ import annotations

import re

from tracer.steps import block_of, matches, stack_of

_BLOCK = re.compile(r"^((?:encoder\.|decoder\.)?)blocks\.(\d+)\.(.+)$")


def stack_spec(spec: dict, stack: str) -> dict:
    """The spec of the stack a step belongs to ("encoder" in an encoder-decoder model has its own)."""
    return spec["encoder"] if stack == "encoder" and spec.get("encoder") else spec


def last_block_output(spec: dict, prefix: str) -> str:
    """The resid_post of a stack's last block."""
    return f"{prefix}blocks.{stack_spec(spec, prefix[:-1]).get('n_layers', 1) - 1}.resid_post"


def stack_output(spec: dict, prefix: str) -> str:
    """The last step of a stack: its final norm, else its last block's resid_post."""
    final = stack_spec(spec, prefix[:-1]).get("final_norm", True)
    return prefix + "final_norm.out" if final else last_block_output(spec, prefix)


def step_inputs(name: str, present: set[str], spec: dict) -> list[str]:
    """The steps whose tensors this step is computed from (those present in the trace)."""
    m = _BLOCK.match(name)
    if m is None:
        return [n for n in _outer_inputs(name, present, spec) if n in present]
    prefix, i, local = m.group(1), int(m.group(2)), m.group(3)
    s = stack_spec(spec, prefix[:-1])
    p = f"{prefix}blocks.{i}."
    x = prefix + "embed.out" if i == 0 else f"{prefix}blocks.{i - 1}.resid_post"
    post = s.get("norm_placement") == "post"
    parallel = s.get("residual") == "parallel"
    after = s.get("norm_placement") == "after"  # olmo2: sublayers read the stream itself
    cross = p + "cross_attn.out" in present or p + "resid_cross" in present
    attn_in = x if post or after else p + "ln1.out"
    cross_in = p + "ln1.out" if post else p + "ln_cross.out"
    mlp_in = ((p + "ln_cross.out" if cross else p + "ln1.out") if post else p + "ln1.out" if s.get("shared_norm")
              else p + "resid_mid" if after else p + "ln2.out")
    memory = stack_output(spec, "encoder.") if prefix == "decoder." else None
    mask_in = "input.decoder_mask" if prefix == "decoder." else "input.mask"
    normed = lambda s: p + f"attn.{s}_norm" if p + f"attn.{s}_norm" in present else p + f"attn.{s}"  # noqa: E731
    rot = lambda s: p + f"attn.{s}_rot" if p + f"attn.{s}_rot" in present else normed(s)  # noqa: E731
    capped = p + "attn.scores.raw" in present
    attn_added = p + "ln1_post.out" if p + "ln1_post.out" in present else p + "attn.out"
    mlp_added = p + "ln2_post.out" if p + "ln2_post.out" in present else p + "mlp.out"
    table = {
        "ln1.out": [p + "resid_mid"] if post else [x],
        "attn.q": [attn_in], "attn.k": [attn_in], "attn.v": [attn_in],
        "attn.q_norm": [p + "attn.q"], "attn.k_norm": [p + "attn.k"],
        "attn.q_rot": [normed("q")], "attn.k_rot": [normed("k")],
        "attn.scores.raw": [rot("q"), rot("k")],
        "attn.scores": [p + "attn.scores.raw"] if capped else [rot("q"), rot("k"), p + "attn.position_bias"],
        "ln1_post.out": [p + "attn.out"], "ln2_post.out": [p + "mlp.out"],
        "attn.mask": [mask_in],
        "attn.masked_scores": [p + "attn.scores", p + "attn.mask"],
        "attn.weights": [p + "attn.masked_scores"],
        "attn.z": [p + "attn.weights", p + "attn.v"],
        "attn.out": [p + "attn.z"],
        "resid_mid": [x, attn_added],
        "ln_cross.out": [p + "resid_cross"] if post else [p + "resid_mid"],
        "cross_attn.q": [cross_in], "cross_attn.k": [memory], "cross_attn.v": [memory],
        "cross_attn.scores": [p + "cross_attn.q", p + "cross_attn.k"],
        "cross_attn.mask": ["input.mask"],
        "cross_attn.masked_scores": [p + "cross_attn.scores", p + "cross_attn.mask"],
        "cross_attn.weights": [p + "cross_attn.masked_scores"],
        "cross_attn.z": [p + "cross_attn.weights", p + "cross_attn.v"],
        "cross_attn.out": [p + "cross_attn.z"],
        "resid_cross": [p + "ln1.out" if post else p + "resid_mid", p + "cross_attn.out"],
        "ln2.out": [x] if parallel else [p + "resid_cross" if cross else p + "resid_mid"],
        "mlp.pre": [mlp_in], "mlp.up": [mlp_in],
        "mlp.post": [p + "mlp.pre", p + "mlp.up"],
        "mlp.router.logits": [mlp_in], "mlp.router.experts": [p + "mlp.router.logits"],
        "mlp.router.weights": [p + "mlp.router.logits", p + "mlp.router.experts"],
        "mlp.expert_out": [mlp_in, p + "mlp.router.experts"],
        "mlp.shared.out": [mlp_in], "mlp.shared.gate": [mlp_in],
        "mlp.out": [p + "mlp.post", p + "mlp.expert_out", p + "mlp.router.weights", p + "mlp.shared.out",
                    p + "mlp.shared.gate"],  # dense, or MoE: routed experts (and qwen2_moe's shared one)
        "resid_post": ([x, p + "attn.out", p + "mlp.out"] if parallel
                       else [mlp_in, p + "mlp.out"] if post
                       else [p + "resid_cross" if cross else p + "resid_mid", mlp_added]),
    }
    return [n for n in table.get(local, []) if n and n in present]


def _outer_inputs(name: str, present: set[str], spec: dict) -> list[str]:
    prefix = stack_of(name) + "." if stack_of(name) else ""
    local = name[len(prefix):]
    ins = "input.decoder_" if prefix == "decoder." else "input."
    table = {
        "embed.tokens": [ins + "ids"],
        "embed.token_types": ["input.token_types"],
        "embed.positions": [ins + "positions"],
        "embed.project_in": [prefix + "embed.tokens"],
        "embed.out": [prefix + ("embed.project_in" if prefix + "embed.project_in" in present else "embed.tokens"),
                      prefix + "embed.token_types", prefix + "embed.positions"],
        "final_norm.out": [last_block_output(spec, prefix)],
    }
    if local in table:
        return table[local]
    last = stack_output(spec, "decoder." if spec.get("encoder") else "")
    return {
        "head.dense": [last], "head.act": ["head.dense"], "head.ln.out": ["head.act"],
        "project_out": [last],
        "logits.raw": ["project_out" if "project_out" in present else last],
        "logits": (["logits.raw"] if "logits.raw" in present else ["head.ln.out"] if "head.ln.out" in present
                   else ["project_out"] if "project_out" in present else [last]),
        "probs": ["logits"],
        "pooled": [last, "input.mask"],
    }.get(name, [])


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
    out = []
    for s in trace.steps:
        ins = step_inputs(s.name, present, spec)
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
