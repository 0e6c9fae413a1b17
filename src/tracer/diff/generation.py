"""Two generation traces (tracer generate --save): which decoding step diverges first, and where the tokens part.

Step t of a generation is recorded under `decode.{t}.` (step 0, the prefill, under the usual names), so the
first failing step name already says the step; this adds it as a number, and the first step whose chosen
token differs, read from each trace's metadata.
"""

from __future__ import annotations

from tracer.diff.compare import DiffReport
from tracer.steps import decode_step


def generation_summary(report: DiffReport, ref_meta: dict, mine_meta: dict) -> dict | None:
    """None unless either side is a generation trace."""
    gen_a, gen_b = ref_meta.get("generation"), mine_meta.get("generation")
    if gen_a is None and gen_b is None and not any(decode_step(s.name)[0] is not None for s in report.steps):
        return None
    first = report.first_divergence
    out = {"first_step": None, "first_decode_step": None, "first_token_step": None, "steps": [None, None]}
    if first is not None:
        t, _ = decode_step(first.name)
        out["first_step"] = first.name
        out["first_decode_step"] = t if t is not None else 0  # 0 = the prefill
    out["steps"] = [g.get("steps") if g else None for g in (gen_a, gen_b)]
    if gen_a and gen_b:
        out["first_token_step"] = _first_token_step(gen_a["rows"], gen_b["rows"])
    return out


def _first_token_step(rows_a: list[dict], rows_b: list[dict]) -> dict | None:
    """{t, row, ref, mine}: the first step at which a row chose a different token (or one side stopped)."""
    best = None
    for r, (a, b) in enumerate(zip(rows_a, rows_b)):
        ids_a, ids_b = a["new_ids"], b["new_ids"]
        for t in range(max(len(ids_a), len(ids_b))):
            x = ids_a[t] if t < len(ids_a) else None
            y = ids_b[t] if t < len(ids_b) else None
            if x != y:
                if best is None or t < best["t"]:
                    best = {"t": t, "row": r, "ref": x, "mine": y}
                break
    return best
