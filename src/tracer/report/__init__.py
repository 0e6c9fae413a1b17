"""What `tracer run` shows, as plain JSON-ready data: the screen renders it, `--json` prints it.

Building the content once and rendering it twice keeps the two views in agreement.
"""

from __future__ import annotations

import math

from tracer.errors import TracerError
from tracer.report.attention import attention_report
from tracer.report.card import model_card
from tracer.report.distribution import lens_report, resolve_position, top_k_report
from tracer.report.flow import flow_plan, step_records
from tracer.report.mask import mask_report, resolve_layer
from tracer.report.options import RunOptions, ids_only_vocab
from tracer.report.tokens import token_rows, tokens_note
from tracer.report.values import values_report
from tracer.steps import matches

__all__ = ["RunOptions", "build_report", "json_view", "jsonable"]


def build_report(trace, options: RunOptions, vocab=ids_only_vocab, model=None) -> dict:
    """The content of every chosen section. `vocab` names token ids; `model` (weights) is only for the lens."""
    meta = trace.meta
    spec = meta["model"]["spec"]
    n_rows = len(meta["tokens"])
    row = options.batch_row
    if not 0 <= row < n_rows:
        raise TracerError(f"--batch-row {row} is out of range: the batch has {n_rows} row(s) (0..{n_rows - 1})")
    sections = options.sections
    tokens = token_rows(meta, row)
    report: dict = {"sections": list(sections), "batch_row": row, "batch_size": n_rows, "dtype": meta.get("dtype"),
                    "prompt": (meta.get("prompts") or [None] * n_rows)[row]}
    report["model"] = model_card(meta)
    report["tokens"] = tokens
    report["tokens_note"] = tokens_note(tokens, report["prompt"])
    report["other_rows"] = [_row_summary(meta["tokens"][b], b) for b in range(n_rows) if b != row]
    layer = resolve_layer(options.layer, spec["n_layers"])
    position = resolve_position(options.position, tokens)
    if "steps" in sections:
        records = step_records(trace, spec)
        report["steps"] = [r for r in records if not options.steps or matches(r["name"], options.steps)]
        report["flow"] = flow_plan(records, options.steps, options.all_steps, options.layers)
    if "values" in sections:
        report["values"] = values_report(trace, options.steps, row)
    mask = mask_report(trace, spec, row, layer) if ("mask" in sections or "attention" in sections) else None
    if "mask" in sections:
        report["mask"] = mask
    if "attention" in sections:
        report["attention"] = attention_report(trace, spec, row, layer, options.head, mask["grids"].get("keep"))
        report["attention"]["labels"] = [t["token"] for t in tokens]
        report["attention"]["pad_positions"] = [t["pos"] for t in tokens if t["pad"]]
    if "top_k" in sections or "lens" in sections:
        dist = top_k_report(trace, row, position, options.top_k, vocab, options.target_id, options.target_text,
                            options.target_note)
        if "top_k" in sections:
            report["distribution"] = {k: v for k, v in dist.items() if k != "top_k"}
            report["top_k"] = dist["top_k"]
        if "lens" in sections:
            final_top = dist["top_k"][0]["id"] if dist["top_k"] else None
            report["lens"] = (lens_report(trace, model, row, position, final_top, vocab) if final_top is not None
                              else {"layers": [], "missing": dist.get("missing")})
    return report


def _row_summary(row_tokens: list[dict], b: int) -> dict:
    pads = sum(1 for t in row_tokens if t.get("pad"))
    return {"row": b, "tokens": len(row_tokens) - pads, "pads": pads}


def json_view(report: dict) -> dict:
    """The report for programs: the screen's folding plan reduced to which blocks were folded."""
    out = {k: v for k, v in report.items() if k != "flow"}
    if "flow" in report:
        out["folding"] = {k: v for k, v in report["flow"].items() if k != "rows"}
    return jsonable(out)


def jsonable(x):
    """Replace non-finite floats (JSON has none) with the strings 'nan', 'inf', '-inf'."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x
