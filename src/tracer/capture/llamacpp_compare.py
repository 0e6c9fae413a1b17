"""Hold a llama.cpp tensor dump to a tracer trace, on what the dump prints (edge values per axis and the sum).

For each printed graph node that names a tracer step (names/ggml.py), the trace's array is laid out as ggml holds
it (axes, merged heads, the converter's RoPE row permutation, only the output rows in the last block), sampled at
the printed indices, and compared. The numbers say how far apart they are; deciding what is close enough (4
printed decimals, ggml's f16 KV cache and GELU table) is the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tracer.capture.llamacpp import GgmlLog, GgmlTensor
from tracer.names.ggml import ROPE_PERMUTED, ggml_step, ggml_step_by_weight, rope_permutation


@dataclass(frozen=True)
class LogComparison:
    step: str  # tracer step
    ggml_name: str
    op: str
    line: int  # of the header in the log
    compared: int  # printed values compared
    max_abs: float  # max |llama.cpp - tracer| over them
    max_ref: float  # max |tracer| over them (scale for a relative reading)
    sum_llamacpp: float | None
    sum_tracer: float | None  # over the same (row-selected) tensor; None when cache padding makes it incomparable
    rows: str  # "all" or "last N" (llama.cpp's output rows in the last block)


_POS_AXIS = {"btd": 2, "heads": 1, "merged": 2, "bhqk": 2}


def compare_log(log: GgmlLog, steps: Mapping[str, np.ndarray], family: str) -> list[LogComparison]:
    """One comparison per printed node that maps to a step present in `steps` (tracer arrays, batch of 1)."""
    out = []
    for t in log.tensors:
        entry = ggml_step(family, t.base, t.op, t.layer)
        if entry is None and t.name.startswith("node_") and t.sources:
            entry = ggml_step_by_weight(family, t.sources[0][0], t.op)
        if entry is None or t.values is None or entry[0] not in steps:
            continue
        step, layout = entry
        permute = family in ROPE_PERMUTED and step.rsplit(".", 1)[-1] in ("q", "k", "q_rot", "k_rot")
        out.append(_compare(t, np.asarray(steps[step], dtype=np.float64), step, layout, permute))
    return out


def as_ggml(ref: np.ndarray, layout: str, permute: bool = False) -> np.ndarray:
    """A tracer array (batch 1) in the NumPy order of ggml's tensor (4 axes)."""
    if layout == "btd":
        a = ref.reshape(1, *ref.shape)
    elif layout == "heads":
        a = ref.transpose(0, 2, 1, 3)
    elif layout == "merged":
        b, h, p, d = ref.shape
        a = ref.transpose(0, 2, 1, 3).reshape(1, b, p, h * d)
    elif layout == "bhqk":
        a = ref
    else:
        raise ValueError(f"unknown layout {layout!r}")
    if permute:
        a = a[..., rope_permutation(a.shape[-1])]
    return a


def _compare(t: GgmlTensor, ref: np.ndarray, step: str, layout: str, permute: bool) -> LogComparison:
    a = as_ggml(ref, layout, permute)
    axis = _POS_AXIS[layout]
    rows = "all"
    if t.shape[axis] < a.shape[axis]:  # llama.cpp kept only the output rows: the last ones
        n = t.shape[axis]
        a = np.take(a, range(a.shape[axis] - n, a.shape[axis]), axis=axis)
        rows = f"last {n}"
    index = [np.asarray(ix) for ix in t.index]
    keep = [ix < n for ix, n in zip(index, a.shape)]  # cache cells beyond the prompt (bhqk's key axis) are padding
    padded = any(not k.all() for k in keep) or any(tn > an for tn, an in zip(t.shape, a.shape))
    got = t.values[np.ix_(*keep)]
    want = a[np.ix_(*[ix[k] for ix, k in zip(index, keep)])]
    if got.shape != want.shape:
        raise ValueError(f"{t.name}: ggml shape {t.shape} does not line up with {step} {ref.shape}")
    diff = np.abs(got - want)
    return LogComparison(step, t.name, t.op, t.line, int(got.size), float(np.nanmax(diff)) if diff.size else 0.0,
                         float(np.abs(want).max()) if want.size else 0.0, t.sum,
                         None if padded else float(a.sum(dtype=np.float64)), rows)
