"""`tracer run --cost`: the measured time of each step beside the FLOPs it was counted to need."""

from __future__ import annotations

from tracer.arch.spec import Spec
from tracer.cost.counts import Pass
from tracer.cost.routes import pass_costs
from tracer.cost.summary import DTYPE_BYTES, template
from tracer.errors import TracerError

SLOWEST = 3  # how many steps are marked as the slow ones


def measured_cost(trace, spec: Spec) -> dict:
    """Per step (summed over layers, as blocks.{i}.*): seconds, share of the time, FLOPs, achieved GFLOP/s.

    FLOPs are counted as the engine computes them: attention over the whole q_len × kv_len square, masked
    after (Pass.dense), at this run's batch and padded length.
    """
    timed = [s for s in trace.steps if s.seconds is not None]
    if not timed:
        return {"rows": [], "slowest": [], "steps": [], "total_seconds": 0.0, "total_flops": 0, "note": None}
    batch, q_len = trace.step("input.ids").shape
    memory = 0
    if spec.cross_attention:  # the decoder's pass, reading the encoder's input.ids positions
        memory, q_len = q_len, trace.step("input.decoder_ids").shape[1]
    itemsize = DTYPE_BYTES.get(str(trace.meta.get("dtype")), 4)
    try:
        flops = {c.name: c.flops for c in pass_costs(spec, Pass(batch, q_len, itemsize=itemsize, dense=True, memory_len=memory))}
        note = "embed.tokens includes computing the rotary cos/sin tables" if spec.positions == "rotary" else None
    except TracerError as exc:  # a route tracer cost does not count yet: the times alone
        flops, note = {}, exc.message
    rows: dict[str, dict] = {}
    for s in timed:
        r = rows.setdefault(template(s.name), {"step": template(s.name), "layers": 0, "seconds": 0.0, "flops": None})
        r["layers"] += 1
        r["seconds"] += s.seconds
        if s.name in flops:
            r["flops"] = (r["flops"] or 0) + flops[s.name]
    total = sum(r["seconds"] for r in rows.values())
    for r in rows.values():
        r["time_share"] = r["seconds"] / total if total > 0 else 0.0
        r["gflops_per_second"] = r["flops"] / r["seconds"] / 1e9 if r["flops"] and r["seconds"] > 0 else None
    slowest = sorted(rows.values(), key=lambda r: r["seconds"], reverse=True)[:SLOWEST]
    return {
        "rows": list(rows.values()),
        "slowest": [r["step"] for r in slowest if r["seconds"] > 0],
        "steps": [{"name": s.name, "seconds": s.seconds, "flops": flops.get(s.name)} for s in timed],
        "total_seconds": total,
        "total_flops": sum(flops.values()),
        "note": note,
    }
