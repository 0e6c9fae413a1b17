"""Why a step diverges, when the tensors say so: structural faults named instead of reported as noise.

Each check looks only at the two traces. Today: the rotary pairing. A rotation keeps the length of each
pair it rotates, so from a step's input (attn.q / attn.k) and output (attn.q_rot / attn.k_rot) alone one
can tell which dimensions a side paired: transformers' rotate_half pairs (x_j, x_{j + d/2}); ggml and
Meta's original code pair neighbours (x_{2j}, x_{2j+1}). A port that pairs the other way than its
checkpoint's layout expects fails at q_rot with inputs that matched.
"""

from __future__ import annotations

import numpy as np

from tracer.trace import Trace

PAIRINGS = {
    "rotate_half": "pairs (x_j, x_j+d/2), transformers' rotate_half",
    "interleaved": "pairs (x_2j, x_2j+1), interleaved as in ggml and Meta's original code",
}


def pair_norms(x: np.ndarray, pairing: str) -> np.ndarray:
    """x [..., d_head] -> [..., d_head / 2]: the squared length of each rotated pair."""
    if pairing == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]
    return a.astype(np.float64) ** 2 + b.astype(np.float64) ** 2


def rotary_pairing(before: np.ndarray, after: np.ndarray, rtol: float = 1e-3) -> str | None:
    """Which pairing turns `before` into `after` by rotations (None: neither keeps every pair's length)."""
    if before.shape != after.shape or before.shape[-1] % 2:
        return None
    for pairing in PAIRINGS:
        p, q = pair_norms(before, pairing), pair_norms(after, pairing)
        if np.allclose(p, q, rtol=rtol, atol=rtol * float(np.abs(p).max() + 1e-30)):
            return pairing
    return None


def rotary_fault(ref: Trace, mine: Trace, step: str) -> str | None:
    """For a failing `...attn.q_rot` / `k_rot` whose input matched: the reason in words, else None."""
    if not step.endswith(("attn.q_rot", "attn.k_rot")):
        return None
    source = step[: -len("_rot")]
    arrays = [_array(t, n) for t in (ref, mine) for n in (source, step)]
    if any(a is None for a in arrays):
        return None
    ref_in, ref_out, mine_in, mine_out = arrays
    theirs, ours = rotary_pairing(ref_in, ref_out), rotary_pairing(mine_in, mine_out)
    if theirs is None or ours is None or theirs == ours:
        return None
    return (f"the rotary embedding pairs dimensions differently: the reference {PAIRINGS[theirs]}; "
            f"this side {PAIRINGS[ours]} (each pair's length is kept on both sides, so the inputs and the "
            f"angles can be right and the pairing wrong)")


def _array(trace: Trace, name: str) -> np.ndarray | None:
    if name not in trace:
        return None
    return trace.step(name).array


def diagnose(ref: Trace, mine: Trace, step: str) -> str | None:
    """The first structural reason found for this step's divergence, in words."""
    return rotary_fault(ref, mine, step)
