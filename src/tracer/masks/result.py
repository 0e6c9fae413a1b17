"""What the mask lab hands back: the canonical mask on the scores, how it got there, and what to watch.

Canonical form on the score tensor [B, H, Q, K]:
  keep  bool     the query attends to the key (neither hard- nor soft-blocked)
  soft  bool     blocked by a finite fill (the key still leaks exp(fill) weight; a fully blocked row is not empty)
  fill  float64  the finite fill on soft cells (0 elsewhere); `fill_mode` says whether it is added or replaces
  bias  float64  the finite value added on kept cells (None when it is zero everywhere)
Cells neither kept nor soft are hard blocks (-inf or False).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tracer.numbers import json_safe

ROLES = "BHQK"


@dataclass(frozen=True)
class BroadcastStep:
    """One op on the way from the input mask to [B,H,Q,K]: `op: in -> out`, with the role each input axis lands on."""

    op: str
    shape_in: tuple[int, ...]
    shape_out: tuple[int, ...]
    roles: tuple[str, ...] | None = None  # per input axis: "B", "H", "Q", "K", "B*H", "-" (new/none)
    note: str | None = None

    def line(self) -> str:
        text = f"{self.op}: {fmt_shape(self.shape_in)} -> {fmt_shape(self.shape_out)}"
        if self.roles:
            text += "   [" + ", ".join(f"dim{i} size{n}→{r}" for i, (n, r) in enumerate(zip(self.shape_in, self.roles))) + "]"
        if self.note:
            text += f"   ({self.note})"
        return text

    def to_json(self) -> dict:
        return {"op": self.op, "in": list(self.shape_in), "out": list(self.shape_out),
                "roles": list(self.roles) if self.roles else None, "note": self.note}


@dataclass
class MaskWarning:
    code: str
    message: str
    level: str = "warn"  # "info" (shown, never fails --strict) | "warn" | "error"
    data: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        out = {"code": self.code, "level": self.level, "message": self.message}
        if self.data:
            out["data"] = json_safe(self.data)
        return out


@dataclass
class InputInfo:
    origin: str
    text: str
    shape: tuple[int, ...] | None
    dtype: str | None
    values: list[tuple[str, int]]  # up to 10 distinct values with counts
    distinct: int
    n_nan: int = 0
    n_posinf: int = 0
    n_neginf: int = 0
    note: str | None = None

    def to_json(self) -> dict:
        return {"origin": self.origin, "text": self.text, "shape": list(self.shape) if self.shape is not None else None,
                "dtype": self.dtype, "values": {k: n for k, n in self.values}, "distinct": self.distinct,
                "nan": self.n_nan, "posinf": self.n_posinf, "neginf": self.n_neginf, "note": self.note}


@dataclass
class MaskResult:
    convention: str
    summary: str
    score_shape: tuple[int, int, int, int]
    score_dtype: str
    input: InputInfo
    steps: list[BroadcastStep]
    keep: np.ndarray  # bool [B,H,Q,K]
    soft: np.ndarray  # bool [B,H,Q,K]
    fill: np.ndarray  # float64 [B,H,Q,K]
    bias: np.ndarray | None  # float64 [B,H,Q,K]
    fill_mode: str  # "add" | "replace"
    hard_outcome: str  # what a row of only hard blocks gives: zeros | nan | uniform | unspecified
    post_zero: bool  # masked probabilities are set to 0 after softmax (Keras 3)
    nan_rows: np.ndarray  # bool [B,H,Q]: NaN/+inf in the mask poisons the row
    user_keep: np.ndarray | None  # bool [B,H,Q,K]: the user's mask alone, before generated parts
    causal_offset: int | None  # the causal diagonal offset used (0 top-left, K-Q bottom-right), None if no causal part
    warnings: list[MaskWarning] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    outcome_notes: dict[str, str] = field(default_factory=dict)  # backend -> what a fully masked row gives
    extra: dict = field(default_factory=dict)

    # ---------- derived views ----------

    @property
    def hard(self) -> np.ndarray:
        return ~self.keep & ~self.soft

    def fully_masked(self) -> list[tuple[int, int, int]]:
        """(b, h, q) of every row with no kept key."""
        rows = ~self.keep.any(axis=-1)
        return [tuple(int(i) for i in idx) for idx in np.argwhere(rows)]

    def row_outcome(self, b: int, h: int, q: int) -> str:
        """What this convention's backend returns for a fully masked row (nan | zeros | uniform | unmasked | ...)."""
        from tracer.masks.outcomes import fully_masked_row_outcome

        return fully_masked_row_outcome(self, b, h, q)

    def additive(self) -> np.ndarray:
        """float64 [B,H,Q,K]: the effective term on the scores (bias on kept, fill on soft, -inf on hard)."""
        out = np.where(self.keep, 0.0 if self.bias is None else self.bias, -np.inf)
        return np.where(self.soft, self.fill, out)

    def override_parts(self) -> tuple[np.ndarray, np.ndarray | None, str]:
        """(keep, bias, note) for the engine's MaskOverride: soft blocks count as blocked (the engine never leaks).
        With `run_record`, what Model.run(mask=...) reads of a mask lab result."""
        note = f"{self.convention} mask: {int(self.keep.sum())} of {self.keep.size} cells kept"
        if self.soft.any():
            note += f"; {int(self.soft.sum())} soft-blocked cells treated as blocked"
        return self.keep, self.bias, note

    def run_record(self) -> dict:
        """How a run's trace records the mask it was given (meta["mask"]["read"])."""
        return {"convention": self.convention, "steps": [st.line() for st in self.steps],
                "warnings": [w.to_json() for w in self.warnings]}

    def level_counts(self) -> dict[str, int]:
        counts = {"info": 0, "warn": 0, "error": 0}
        for w in self.warnings:
            counts[w.level] = counts.get(w.level, 0) + 1
        return counts

    def fired(self) -> bool:
        """A warning that makes --strict fail (info notes never do)."""
        return any(w.level in ("warn", "error") for w in self.warnings)

    def codes(self) -> list[str]:
        return [w.code for w in self.warnings]

    def to_json(self) -> dict:
        fm = self.fully_masked()
        return {
            "convention": self.convention,
            "summary": self.summary,
            "score_shape": list(self.score_shape),
            "score_dtype": self.score_dtype,
            "input": self.input.to_json(),
            "steps": [s.to_json() for s in self.steps],
            "keep": self.keep.astype(np.int8).tolist(),
            "soft_blocked": int(self.soft.sum()),
            "hard_blocked": int(self.hard.sum()),
            "kept": int(self.keep.sum()),
            "fill_mode": self.fill_mode,
            "fill_values": sorted({float(v) for v in np.unique(self.fill[self.soft])}) if self.soft.any() else [],
            "bias_nonzero": int(np.count_nonzero(self.bias)) if self.bias is not None else 0,
            "bias": self.bias.tolist() if self.bias is not None else None,
            "causal_offset": self.causal_offset,
            "fully_masked": [list(r) for r in fm],
            "fully_masked_outcome": sorted({self.row_outcome(*r) for r in fm}),
            "outcomes": dict(self.outcome_notes),
            "warnings": [w.to_json() for w in self.warnings],
            "notes": list(self.notes),
            "extra": json_safe(self.extra),
        }


def fmt_shape(shape: tuple[int, ...]) -> str:
    return "(" + ",".join(str(int(n)) for n in shape) + ")"
