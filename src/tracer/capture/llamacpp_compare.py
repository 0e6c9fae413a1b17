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


# ---- judging what the log printed

PRINT_ATOL = 5e-5  # `%12.4f`: a printed value is within half its last digit of the float llama.cpp held
SUM_RTOL = 1e-3  # the printed sum is float32-accumulated in ggml's order; NumPy sums in another


@dataclass(frozen=True)
class JudgedComparison:
    comparison: LogComparison
    tolerance: float  # on max_abs
    values_ok: bool
    sum_ok: bool | None  # None: no comparable sum (cache padding, or none printed)

    @property
    def ok(self) -> bool:
        return self.values_ok and self.sum_ok is not False


@dataclass(frozen=True)
class LogJudgement:
    judged: list[JudgedComparison]
    printed: int  # nodes in the log
    unmapped: list[str]  # printed node names that name no tracer step (views, masks, bare norms)
    flash_attention: bool  # the log has attention but no kq_soft_max node: -fa on hid the weights

    @property
    def first_divergence(self) -> JudgedComparison | None:
        return next((j for j in self.judged if not j.ok), None)

    @property
    def passed(self) -> bool:
        return bool(self.judged) and self.first_divergence is None


def judge_log(log: GgmlLog, steps: Mapping[str, np.ndarray], family: str, atol: float, rtol: float) -> LogJudgement:
    """compare_log, each comparison held to the printing's half digit plus atol + rtol * max(1, max |tracer|),
    and its sum (when comparable) to SUM_RTOL relative."""
    comparisons = compare_log(log, steps, family)
    judged = []
    for c in comparisons:
        tol = PRINT_ATOL + atol + rtol * max(1.0, c.max_ref)
        sum_ok = None
        if c.sum_tracer is not None and c.sum_llamacpp is not None:
            sum_ok = bool(abs(c.sum_llamacpp - c.sum_tracer) <= max(SUM_RTOL, rtol) * max(1.0, abs(c.sum_tracer)))
        judged.append(JudgedComparison(c, tol, bool(c.max_abs <= tol), sum_ok))
    compared_lines = {c.line for c in comparisons}
    unmapped = [t.name for t in log.tensors if t.line not in compared_lines]
    bases = {t.base for t in log.tensors}
    flash = "kq_soft_max" not in bases and any(b in bases for b in ("kqv_out", "attn_out", "Qcur"))
    return LogJudgement(judged, len(log.tensors), unmapped, flash)
