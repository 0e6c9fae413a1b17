"""Compare two traces step by step: match names in execution order, measure, judge, find the first divergence.

The first trace is the reference. A step passes when every compared cell
satisfies |mine - ref| <= atol + rtol * |ref| (np.allclose's test, relative to
the reference) and both have NaN and +-inf in the same cells. Integer and
boolean steps (ids, masks) must match exactly. Cells at padding positions are
skipped: what a model computes there is a convention, not a result.

Reason classes for a failing step, checked in this order:
    missing   the step is in one trace only (a failure only when both traces are
              complete engine traces; a partial dump just leaves it uncompared)
    shape     shapes differ
    dtype     one side is floating point, the other integer or boolean
    nan/inf   NaN or infinity in different cells
    numeric   finite values outside the tolerance
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tracer.diff import metrics as M
from tracer.diff.diagnose import diagnose
from tracer.diff.distribution import distribution_diff, is_distribution_step
from tracer.diff.layouts import permutation_to
from tracer.diff.profile import BlockProfile, block_profiles, plan_of, step_growth
from tracer.diff.routing import first_expert_change
from tracer.steps import block_of, matches
from tracer.trace import Step, Trace

# float32 defaults; see man/diff-section.roff.txt for the reasoning and for bf16/fp16/float64 values.
DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-3
REASONS = ("missing", "shape", "dtype", "nan/inf", "numeric")

# A transformers-style dump fills blocked scores with the dtype's minimum instead of -inf.
BLOCKED_SCORE = -1e30


@dataclass
class StepDiff:
    name: str
    status: str  # pass | fail | missing | extra | stats-only
    reason: str | None = None
    detail: str = ""
    ref_shape: tuple[int, ...] | None = None
    mine_shape: tuple[int, ...] | None = None
    ref_dtype: str | None = None
    mine_dtype: str | None = None
    metrics: dict = field(default_factory=dict)
    distribution: dict | None = None
    inherited_db: float | None = None  # NMSE (dB) of the step's inputs
    growth_db: float | None = None  # this step's NMSE (dB) minus its inputs'
    note: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    @property
    def block(self) -> int | None:
        return block_of(self.name)


@dataclass
class DiffReport:
    ref_label: str
    mine_label: str
    atol: float
    rtol: float
    steps: list[StepDiff]
    blocks: list[BlockProfile]
    notes: list[str] = field(default_factory=list)
    extras: dict = field(default_factory=dict)  # weight diff, moved tokens, name-map report (filled by the CLI)

    @property
    def first_divergence(self) -> StepDiff | None:
        return next((s for s in self.steps if s.failed), None)

    @property
    def compared(self) -> list[StepDiff]:
        return [s for s in self.steps if s.status in ("pass", "fail")]

    @property
    def diverged(self) -> bool:
        return self.first_divergence is not None


def compare(
    ref: Trace,
    mine: Trace,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    steps: tuple[str, ...] | None = None,
    missing_fails: bool = False,
    top_k: int = 5,
    ref_label: str = "ref",
    mine_label: str = "mine",
) -> DiffReport:
    """Step-by-step comparison of `mine` against the reference `ref`."""
    real = real_positions(ref)
    ref_steps = {s.name: s for s in ref.steps}
    mine_steps = {s.name: s for s in mine.steps}
    order = execution_order(ref.names(), mine.names())
    if steps:
        order = [n for n in order if matches(n, steps)]
    notes = []
    if real is not None and not real.all():
        notes.append(f"{int((~real).sum())} padding position(s) skipped in every step")
    results, nmse_of = [], {}
    for name in order:
        r, m = ref_steps.get(name), mine_steps.get(name)
        if m is None:
            d = StepDiff(name, "fail" if missing_fails else "missing", "missing" if missing_fails else None,
                         f"only in {ref_label}", r.shape, None, r.dtype)
        elif r is None:
            d = StepDiff(name, "fail" if missing_fails else "extra", "missing" if missing_fails else None,
                         f"only in {mine_label}", None, m.shape, None, m.dtype)
        else:
            d, nmse = compare_step(r, m, atol, rtol, real, top_k)
            if nmse is not None:
                nmse_of[name] = nmse
        results.append(d)
    plan = plan_of(ref, mine)
    for d in results:
        d.inherited_db, d.growth_db = step_growth(d.name, order, nmse_of, plan)
    report = DiffReport(ref_label, mine_label, atol, rtol, results, block_profiles(order, nmse_of, results), notes)
    first = report.first_divergence
    if first is not None and first.reason == "numeric":
        first.note = diagnose(ref, mine, first.name) or first.note
    rerouted = first_expert_change(ref, mine, real)  # MoE: named before the numeric divergence
    if rerouted is not None:
        report.extras["expert_choice"] = rerouted
    return report


def execution_order(ref_names: list[str], mine_names: list[str]) -> list[str]:
    """The reference's order, with steps only `mine` has placed after the step they follow there."""
    in_ref = set(ref_names)
    after: dict[str | None, list[str]] = {}
    anchor = None
    for name in mine_names:
        if name in in_ref:
            anchor = name
        else:
            after.setdefault(anchor, []).append(name)
    order = list(after.get(None, []))
    for name in ref_names:
        order.append(name)
        order += after.get(name, [])
    return order


def real_positions(trace: Trace) -> np.ndarray | None:
    """bool [batch, pos]: True at real tokens, from the reference's input.mask (None when unknown)."""
    if "input.mask" not in trace or trace.step("input.mask").array is None:
        return None
    return np.asarray(trace["input.mask"]) != 0


def compare_step(r: Step, m: Step, atol: float, rtol: float, real: np.ndarray | None, top_k: int) -> tuple[StepDiff, float | None]:
    """One step's verdict and metrics, plus its NMSE (linear) for the error profile."""
    d = StepDiff(r.name, "pass", ref_shape=r.shape, mine_shape=m.shape, ref_dtype=r.dtype, mine_dtype=m.dtype)
    broadcast = _mask_broadcast(r, m)
    if tuple(r.shape) != tuple(m.shape) and broadcast is None:
        return _fail(d, "shape", _shape_detail(r.shape, m.shape)), None
    if _is_float(r.dtype) != _is_float(m.dtype):
        return _fail(d, "dtype", f"{r.dtype} vs {m.dtype}: one is floating point, the other is not"), None
    if r.dtype != m.dtype:
        d.note = f"dtypes differ ({r.dtype} vs {m.dtype}); compared in float64"
    if r.array is None or m.array is None:
        return _compare_stats(d, r, m, atol, rtol), None
    a, b = np.asarray(r.array), np.asarray(m.array)
    if broadcast is not None:
        a, b = np.broadcast_to(a, broadcast), np.broadcast_to(b, broadcast)
        d.note = "keep-masks broadcast to a common shape"
    if r.name.endswith("attn.masked_scores") and _is_float(r.dtype):
        a, b = _blocked_as_neg_inf(a), _blocked_as_neg_inf(b)
    cells = real_cells(r.axes, a.shape, real)
    if not _is_float(r.dtype):
        d = _compare_exact(d, a, b, cells)
        return d, (None if d.failed else 0.0)
    return _compare_float(d, r, a, b, cells, atol, rtol, top_k)


def _compare_float(d: StepDiff, r: Step, a, b, cells, atol, rtol, top_k) -> tuple[StepDiff, float | None]:
    if cells is None:
        real_index = None
        ra, mb = a.reshape(-1), b.reshape(-1)  # views: a [batch, pos, vocab] step is not copied
    else:
        real_index = np.flatnonzero(cells)  # flat positions of the real cells
        ra, mb = a.reshape(-1)[real_index], b.reshape(-1)[real_index]
    s = M.error_summary(ra, mb, atol, rtol)

    def where(k: int) -> tuple[int, ...]:
        flat = k if real_index is None else int(real_index[k])
        return tuple(int(i) for i in np.unravel_index(flat, a.shape)) if a.size else ()

    if s["nonfinite_mismatch"]:
        return _fail(d, "nan/inf", _nonfinite_detail(a, b, s["nonfinite_mismatch"], where(s["first_nonfinite"]), r.axes)), None
    worst = where(s["worst"])
    d.metrics = {
        "max_abs": s["max_abs"],
        "mean_abs": s["mean_abs"],
        "max_rel": s["max_rel"],
        "cosine": s["cosine"],
        "nmse_db": M.to_db(s["nmse"]),
        "compared": s["compared"],
        "outside_tolerance": s["outside"],
        "worst_index": list(worst),
        "worst_ref": float(a[worst]) if a.size else 0.0,
        "worst_mine": float(b[worst]) if a.size else 0.0,
        "worst_excess": s["worst_excess"],
    }
    if is_distribution_step(r.name):
        d.distribution = distribution_diff(r.name, a, b, r.axes, None if cells is None else cells[..., 0], top_k)
    if s["outside"]:
        _fail(d, "numeric", f"{s['outside']} of {s['compared']} cells outside atol+rtol*|ref|; worst at "
                            f"{_index_text(worst, r.axes)}: ref {d.metrics['worst_ref']:.6g}, mine {d.metrics['worst_mine']:.6g}")
    return d, s["nmse"]


def _compare_exact(d: StepDiff, a, b, cells) -> StepDiff:
    considered = np.ones(a.shape, dtype=bool) if cells is None else cells
    differ = (a != b) & considered
    n = int(differ.sum())
    d.metrics = {"compared": int(considered.sum()), "outside_tolerance": n,
                 "max_abs": float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0, where=considered))}
    if n:
        first = tuple(int(i) for i in np.argwhere(differ)[0])
        _fail(d, "numeric", f"{n} of {d.metrics['compared']} values differ (must match exactly); first at {list(first)}: "
                            f"ref {a[first]}, mine {b[first]}")
    return d


def _compare_stats(d: StepDiff, r: Step, m: Step, atol: float, rtol: float) -> StepDiff:
    """Only statistics on one side. Elementwise closeness bounds how far min, max and mean can move,
    so a statistic outside that bound proves a divergence; inside it proves nothing."""
    rs, ms = r.stats, m.stats
    if (rs.get("nan", 0), rs.get("inf", 0)) != (ms.get("nan", 0), ms.get("inf", 0)):
        return _fail(d, "nan/inf", f"NaN/Inf counts differ: ref {rs.get('nan', 0)}/{rs.get('inf', 0)}, "
                                   f"mine {ms.get('nan', 0)}/{ms.get('inf', 0)} (from statistics)")
    bound = atol + rtol * float(rs.get("absmax", 0.0))
    for key in ("min", "max", "mean"):
        if key in rs and key in ms and abs(float(ms[key]) - float(rs[key])) > bound:
            return _fail(d, "numeric", f"{key} moved from {rs[key]:.6g} to {ms[key]:.6g} (from statistics; "
                                       "keep the tensor to see where)")
    d.status = "stats-only"
    d.detail = "statistics agree; the tensor was not kept on both sides"
    return d


def _fail(d: StepDiff, reason: str, detail: str) -> StepDiff:
    d.status, d.reason, d.detail = "fail", reason, detail
    return d


# ---------- helpers ----------


def _is_float(dtype: str) -> bool:
    return np.dtype(dtype).kind in "fc"


def _mask_broadcast(r: Step, m: Step) -> tuple[int, ...] | None:
    """Keep-masks are recorded broadcastable to the scores; two different broadcast shapes are no mismatch."""
    if not r.name.endswith("attn.mask") or tuple(r.shape) == tuple(m.shape) or len(r.shape) != len(m.shape):
        return None
    try:
        return tuple(np.broadcast_shapes(tuple(r.shape), tuple(m.shape)))
    except ValueError:
        return None


def _blocked_as_neg_inf(a: np.ndarray) -> np.ndarray:
    return np.where(a <= BLOCKED_SCORE, -np.inf, a).astype(a.dtype, copy=False)


def real_cells(axes: tuple[str, ...], shape: tuple[int, ...], real: np.ndarray | None) -> np.ndarray | None:
    """bool mask of `shape`: False at padding positions along a pos/q_len axis (None: compare all)."""
    if real is None or not axes or axes[0] != "batch" or real.all():
        return None
    for axis, name in enumerate(axes):
        if name in ("pos", "q_len") and shape[axis] == real.shape[1] and shape[0] == real.shape[0]:
            index = [1] * len(shape)
            index[0], index[axis] = real.shape[0], real.shape[1]
            return np.broadcast_to(real.reshape(index), shape)
    return None


def _index_text(index: tuple[int, ...], axes: tuple[str, ...]) -> str:
    if axes and len(axes) == len(index) and not axes[0].startswith("dim"):
        return "[" + ", ".join(f"{a}={i}" for a, i in zip(axes, index)) + "]"
    return str(list(index))


def _shape_detail(ref_shape, mine_shape) -> str:
    text = f"ref {list(ref_shape)}, mine {list(mine_shape)}"
    perm = permutation_to(tuple(mine_shape), tuple(ref_shape))
    if perm is not None:
        return text + f"; mine would fit after permuting its axes to {perm} (a layout difference?)"
    if int(np.prod(ref_shape)) == int(np.prod(mine_shape)):
        return text + "; same number of elements (merged or split axes?)"
    return text


def _nonfinite_detail(a, b, count: int, first: tuple[int, ...], axes) -> str:
    def census(x):
        return f"{int(np.isnan(x).sum())} NaN, {int(np.isinf(x).sum())} inf"

    return (f"NaN/Inf in different cells ({count}): ref has {census(a)}, mine has {census(b)}; "
            f"first at {_index_text(first, axes)}: ref {a[first]}, mine {b[first]}")
