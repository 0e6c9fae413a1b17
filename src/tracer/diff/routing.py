"""Mixture of experts: the first token whose chosen experts differ between two traces.

A port that routes one token to another expert has a bug whatever the numbers say next to it
(a top-k tie broken the other way, a router in the wrong dtype, a forgotten renormalisation), and
after that token every later number differs for that reason. So `tracer diff` names it before the
numeric divergence. The experts are compared as sets: the same experts in another order route the
token the same way.
"""

from __future__ import annotations

import numpy as np

from tracer.steps import block_of
from tracer.trace import Trace


def router_steps(trace: Trace) -> list[str]:
    return [n for n in trace.names() if n.endswith("mlp.router.experts") and block_of(n) is not None]


def first_expert_change(ref: Trace, mine: Trace, real: np.ndarray | None) -> dict | None:
    """{"step", "block", "row", "pos", "ref", "mine", "tokens_rerouted"} for the first block (then row,
    then position) whose chosen experts differ as sets; None when every compared token agrees."""
    for name in router_steps(ref):
        if name not in mine or ref.step(name).array is None or mine.step(name).array is None:
            continue
        a, b = np.sort(ref[name], axis=-1), np.sort(mine[name], axis=-1)  # [batch, pos, top_k]
        if a.shape != b.shape:
            continue
        differ = (a != b).any(axis=-1)  # [batch, pos]
        if real is not None and real.shape == differ.shape:
            differ &= real
        if differ.any():
            row, pos = (int(i) for i in np.argwhere(differ)[0])
            return {"step": name, "block": block_of(name), "row": row, "pos": pos,
                    "ref": ref[name][row, pos].tolist(), "mine": mine[name][row, pos].tolist(),
                    "tokens_rerouted": int(differ.sum())}
    return None
