"""The builder every convention writes into: planes ANDed or added onto [B,H,Q,K], then classified.

A convention says what the framework does, in the framework's order:
  block(keep, how)   cells where keep is False get -inf, a finite fill (added), or are replaced by a fill
  add(values)        an additive plane (float masks, biases); NaN/+inf poison the row
and finish() turns the accumulated term into keep / soft / fill / bias.
Additions are checked in the score dtype: two finite planes that overflow it become -inf, as they
would in the framework (ML004).
"""

from __future__ import annotations

import numpy as np

from tracer.errors import TracerError
from tracer.masks.literal import MaskSource, finfo_max
from tracer.masks.options import MaskOptions
from tracer.masks.result import BroadcastStep, InputInfo, MaskResult, MaskWarning

MAX_CELLS = 1 << 24  # 16M cells: the canonical arrays stay well under a gigabyte


class Builder:
    def __init__(self, convention: str, summary: str, score_shape: tuple[int, ...], opts: MaskOptions,
                 source: MaskSource | None = None):
        self.convention = convention
        self.summary = summary
        self.shape = check_score_shape(score_shape)
        self.opts = opts
        self.source = source
        B, H, Q, K = self.shape
        self.term = np.zeros(self.shape, dtype=np.float64)  # additive term; -inf = hard block
        self.replaced = np.zeros(self.shape, dtype=bool)  # cells replaced by replace_fill (jnp.where style)
        self.replace_fill: float | None = None
        self.nan_rows = np.zeros((B, H, Q), dtype=bool)
        self.user_keep: np.ndarray | None = None
        self.steps: list[BroadcastStep] = []
        self.warnings: list[MaskWarning] = []
        self.notes: list[str] = []
        self.outcome_notes: dict[str, str] = {}
        self.extra: dict = {}
        self.hard_outcome = "zeros"
        self.post_zero = False
        self.causal_offset: int | None = None
        self.input_note: str | None = None

    # ---------- recording ----------

    def step(self, op: str, shape_in, shape_out, roles=None, note: str | None = None) -> None:
        self.steps.append(BroadcastStep(op, tuple(int(n) for n in shape_in), tuple(int(n) for n in shape_out),
                                        tuple(roles) if roles else None, note))

    def warn(self, code: str, message: str, level: str = "warn", **data) -> None:
        if any(w.code == code and w.message == message for w in self.warnings):
            return
        self.warnings.append(MaskWarning(code, message, level, data))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # ---------- planes ----------

    def full(self, plane: np.ndarray) -> np.ndarray:
        """Broadcast a [Q,K], [B|1,H|1,Q,K] plane onto the scores (callers have already explained how)."""
        if plane.ndim == 2:
            plane = plane[None, None]
        return np.broadcast_to(plane, self.shape)

    def block(self, keep: np.ndarray, how: str | float = "-inf", user: bool = False) -> None:
        """Block the cells where `keep` is False: '-inf', 'replace' (with replace_fill), or a finite fill added."""
        keep = self.full(np.asarray(keep, dtype=bool))
        if user:
            self.user_keep = keep.copy() if self.user_keep is None else (self.user_keep & keep)
        if how == "-inf":
            self.term = np.where(keep, self.term, -np.inf)
        elif how == "replace":
            if self.replace_fill is None:
                raise AssertionError("replace_fill must be set before a replace block")
            self.replaced |= ~keep
        else:
            self.add(np.where(keep, 0.0, float(how)), user=False, label="fill")

    def add(self, values: np.ndarray, user: bool = True, label: str = "mask") -> None:
        """Add a float plane to the scores' additive term, as the framework does."""
        values = self.full(np.asarray(values, dtype=np.float64))
        poison = np.isnan(values) | np.isposinf(values)
        if poison.any():
            self.nan_rows |= poison.any(axis=-1)
            values = np.where(poison, -np.inf, values)
        if user:
            kept = np.isfinite(values) & (values > self.opts.soft_threshold)
            self.user_keep = kept.copy() if self.user_keep is None else (self.user_keep & kept)
        limit = finfo_max(self.opts.score_dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            lone = np.isfinite(values) & (np.abs(values) > limit)
            total = self.term + values
            summed = np.isfinite(self.term) & np.isfinite(values) & ~lone & (np.abs(total) > limit)
        if lone.any():
            v = float(values[lone].flat[0])
            self.warn("ML004", f"{label} value {v:.4g} does not fit {self.opts.score_dtype} (max {limit:.4g}): "
                      f"it becomes -inf there, so the cell is a hard block and a fully masked row can turn NaN "
                      f"(torch masked_fill raises 'value cannot be converted ... without overflow')",
                      cells=int(lone.sum()))
        if summed.any():
            self.warn("ML004", f"adding the {label} to a finite fill overflows {self.opts.score_dtype} at "
                      f"{int(summed.sum())} cell(s) (e.g. finfo.min + finfo.min, or finfo.min plus a negative bias): "
                      f"the sum is -inf, so those rows behave like -inf masks (NaN or zeros), not like the finite fill",
                      cells=int(summed.sum()))
        self.term = np.where(lone | summed, -np.inf, total)

    def set_replace_fill(self, fill: float) -> None:
        self.replace_fill = float(fill)

    # ---------- generated parts ----------

    def causal_offset_for(self, default_align: str, q_len: int, kv_len: int) -> tuple[int, str]:
        """The causal offset this run uses, and the alignment name. Warns ML008 where the corner matters."""
        align = self.opts.causal_align or default_align
        past = self.opts.past
        if align == "top-left":
            offset = 0
        else:
            offset = past if past is not None else kv_len - q_len
        from tracer.masks.warnings import warn_causal_alignment

        warn_causal_alignment(self, align, offset, q_len, kv_len)
        return offset, align

    def finish(self) -> MaskResult:
        if self.source is not None and self.source.overflowed:
            v = self.source.overflowed[0]
            self.warn("ML004", f"the literal value {v:.4g} does not fit {self.source.array.dtype}: it became "
                      f"{'-' if v < 0 else '+'}inf when cast (torch masked_fill raises 'value cannot be converted to "
                      f"type at::Half without overflow'; a plain assignment silently gives inf)")
        thr = self.opts.soft_threshold
        hard = np.isneginf(self.term)
        replaced = self.replaced & (self.replace_fill is not None)
        soft_added = ~hard & ~replaced & (self.term <= thr)
        keep = ~hard & ~replaced & ~soft_added
        soft = soft_added.copy()
        fill = np.where(soft_added, self.term, 0.0)
        if replaced.any() and np.isfinite(self.replace_fill):
            soft |= replaced
            fill = np.where(replaced, self.replace_fill, fill)
        fill_mode = "replace" if replaced.any() else "add"
        bias = np.where(keep, self.term, 0.0)
        bias = bias if np.count_nonzero(bias) else None
        result = MaskResult(
            convention=self.convention, summary=self.summary, score_shape=self.shape,
            score_dtype=self.opts.score_dtype, input=describe_input(self.source, self.input_note),
            steps=self.steps, keep=keep, soft=soft, fill=fill, bias=bias, fill_mode=fill_mode,
            hard_outcome=self.hard_outcome, post_zero=self.post_zero, nan_rows=self.nan_rows,
            user_keep=self.user_keep, causal_offset=self.causal_offset, warnings=self.warnings,
            notes=self.notes, outcome_notes=self.outcome_notes, extra=self.extra,
        )
        from tracer.masks.warnings import post_checks

        post_checks(result, self.opts)
        return result


def check_score_shape(shape) -> tuple[int, int, int, int]:
    shape = tuple(int(n) for n in shape)
    if len(shape) != 4:
        raise TracerError(f"--scores needs 4 sizes B,H,Q,K, got {len(shape)}")
    if min(shape) < 1:
        raise TracerError(f"--scores {','.join(map(str, shape))}: every size must be >= 1")
    if int(np.prod(shape)) > MAX_CELLS:
        raise TracerError(f"--scores {','.join(map(str, shape))} is {int(np.prod(shape)):,} cells; the mask lab stops at "
                          f"{MAX_CELLS:,}", hint="show a smaller B/H; the pattern rarely depends on them")
    return shape  # type: ignore[return-value]


def describe_input(source: MaskSource | None, note: str | None) -> InputInfo:
    """Shape, dtype, up to 10 distinct values with counts, and the NaN/inf counts."""
    if source is None or source.is_none:
        return InputInfo("none", "none", None, None, [], 0, note=note)
    if source.origin == "keyword" or source.array is None:
        return InputInfo(source.origin, source.text, None, None, [], 0, note=note)
    a = source.array
    flat = np.asarray(a).reshape(-1)
    as_float = flat.astype(np.float64) if flat.dtype != bool else flat.astype(np.float64)
    n_nan = int(np.isnan(as_float).sum())
    n_pos = int(np.isposinf(as_float).sum())
    n_neg = int(np.isneginf(as_float).sum())
    if flat.dtype == bool:
        uniq, counts = np.unique(flat, return_counts=True)
        values = [(str(bool(u)), int(c)) for u, c in zip(uniq, counts)]
    else:
        uniq, counts = np.unique(as_float, return_counts=True)  # NaNs collapse into one entry (numpy >= 1.21)
        values = [(format_value(u, flat.dtype), int(c)) for u, c in zip(uniq, counts)]
    note = note or source.inferred_note
    return InputInfo(source.origin, source.text, tuple(int(n) for n in a.shape), dtype_name(a.dtype), values[:10],
                     len(values), n_nan, n_pos, n_neg, note)


def dtype_name(dtype: np.dtype) -> str:
    return "bfloat16" if "bfloat16" in str(dtype) else str(dtype)


def format_value(v: float, dtype) -> str:
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    if np.issubdtype(np.dtype(dtype), np.integer) or float(v).is_integer() and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.6g}"
