"""Where NaN or Inf first appeared in a run (like llama.cpp's NaN check, but the run goes on)."""

from __future__ import annotations

import math

from tracer.steps import matches

# steps where -inf is the design, not a fault: blocked scores, additive masks and biases
EXPECTED_INF = ("*.attn.masked_scores", "*.cross_attn.masked_scores", "*.attn.mask", "*.position_bias", "*.attn.bias")


def first_nonfinite(trace) -> dict:
    """{"first_nan": step or None, "first_inf": step or None, "steps": how many steps hold any} from the statistics."""
    first_nan = first_inf = None
    count = 0
    for s in trace.steps:
        nan = int(s.stats.get("nan", 0) or 0)
        inf = int(s.stats.get("inf", 0) or 0)
        if inf and matches(s.name, EXPECTED_INF):
            inf = 0
        if nan or inf:
            count += 1
        if nan and first_nan is None:
            first_nan = {"step": s.name, "op": s.op, "count": nan}
        if inf and first_inf is None:
            first_inf = {"step": s.name, "op": s.op, "count": inf}
    return {"first_nan": first_nan, "first_inf": first_inf, "steps": count}


def describe(nonfinite: dict) -> str | None:
    """One line for the screen, or None when every number is finite."""
    parts = []
    for kind, key in (("NaN", "first_nan"), ("Inf", "first_inf")):
        hit = nonfinite.get(key)
        if hit:
            parts.append(f"{kind} first appeared at {hit['step']} ({hit['count']} values)")
    if not parts:
        return None
    return "; ".join(parts) + f"; {nonfinite['steps']} steps hold non-finite values, so their numbers below are not meaningful"


def generation_nonfinite(gen) -> dict | None:
    """The warning for a generation whose logits held NaN or Inf ({code, level, message, data}, as the other
    generation warnings), or None: a token picked from NaN logits is not the model's choice."""
    bad = [st for st in gen.steps
           if not math.isfinite(st.logit_absmax) or any(rs is not None and not math.isfinite(rs.prob) for rs in st.rows)]
    if not bad:
        return None
    kind = "NaN" if any(math.isnan(st.logit_absmax) or any(rs is not None and math.isnan(rs.prob) for rs in st.rows)
                        for st in bad) else "Inf"
    steps = "every step" if len(bad) == len(gen.steps) else f"{len(bad)} of {len(gen.steps)} steps, first step {bad[0].t}"
    message = (f"the logits hold {kind} ({steps}): the tokens chosen there are not the model's choice and their "
               "probabilities are not meaningful (tracer run on the prompt names the first step that produced it)")
    return {"code": "nonfinite", "level": "warn", "message": message,
            "data": {"kind": kind, "steps": [st.t for st in bad]}}
