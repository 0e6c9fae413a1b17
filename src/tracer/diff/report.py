"""The diff as JSON for programs.

Non-finite numbers are not JSON: they are written as the strings "inf", "-inf", "nan", as in every
`--json` output (tracer.numbers.json_safe). An exact match has nmse_db "-inf" and `"exact": true`;
a growth of "inf" next to `"introduced": true` means the error starts at that step.
"""

from __future__ import annotations

import math
from dataclasses import asdict

from tracer.diff.compare import DiffReport, StepDiff
from tracer.numbers import json_safe





def step_json(s: StepDiff) -> dict:
    metrics = dict(s.metrics)
    if "max_abs" in metrics:
        metrics["exact"] = metrics["max_abs"] == 0.0
    out = {
        "name": s.name,
        "status": s.status,
        "reason": s.reason,
        "detail": s.detail,
        "block": s.block,
        "ref_shape": list(s.ref_shape) if s.ref_shape is not None else None,
        "mine_shape": list(s.mine_shape) if s.mine_shape is not None else None,
        "ref_dtype": s.ref_dtype,
        "mine_dtype": s.mine_dtype,
        "metrics": metrics,
        "inherited_nmse_db": s.inherited_db,
        "growth_db": s.growth_db,
        "introduced": s.growth_db == math.inf,
    }
    if s.distribution is not None:
        out["distribution"] = s.distribution
    if s.note:
        out["note"] = s.note
    return out


def report_json(report: DiffReport) -> dict:
    first = report.first_divergence
    out = {
        "verdict": "diverged" if first else "match",
        "reference": report.ref_label,
        "mine": report.mine_label,
        "atol": report.atol,
        "rtol": report.rtol,
        "first_divergence": None if first is None else {
            "step": first.name, "reason": first.reason, "detail": first.detail, "block": first.block,
        },
        "counts": {
            status: sum(1 for s in report.steps if s.status == status)
            for status in ("pass", "fail", "missing", "extra", "stats-only")
        },
        "steps": [step_json(s) for s in report.steps],
        "blocks": [dict(asdict(b), introduced=b.introduced) for b in report.blocks],
        "missing": [s.name for s in report.steps if s.ref_shape is not None and s.mine_shape is None],  # only in the reference
        "extra": [s.name for s in report.steps if s.ref_shape is None and s.mine_shape is not None],  # only in mine
        "notes": report.notes,
    }
    out.update(report.extras)
    if "inputs" in report.extras:  # two different inputs never "match"; only their shared prefix was compared
        out["verdict"] = "inputs differ"
    return json_safe(out)
