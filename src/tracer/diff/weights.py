"""Weight diff of two checkpoint folders: per tensor relative change, and which layers changed most.

Tensors are read one at a time through the memory-mapped safetensors reader
(single file or shards listed in model.safetensors.index.json), so two large
checkpoints never sit in memory together.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracer.checkpoint.weights import WeightFiles

_LAYER = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)\.")


@dataclass
class TensorChange:
    name: str
    status: str  # same | changed | shape | only-ref | only-mine
    ref_shape: tuple[int, ...] | None = None
    mine_shape: tuple[int, ...] | None = None
    ref_dtype: str | None = None  # storage dtype code, e.g. BF16
    mine_dtype: str | None = None
    rel_change: float = 0.0  # ||mine - ref|| / ||ref||
    max_abs: float = 0.0
    ref_norm_sq: float = 0.0
    delta_norm_sq: float = 0.0
    quant: dict | None = None  # a converted model: QuantJudgement's fields (quantization error or a fault)

    @property
    def layer(self) -> int | None:
        return layer_of(self.name)


@dataclass
class LayerChange:
    layer: int | None  # None: tensors outside the numbered layers (embeddings, final norm, head)
    rel_change: float  # sqrt(sum ||delta||^2 / sum ||ref||^2) over the layer's tensors
    changed: int
    tensors: int
    most_changed: str | None


@dataclass
class WeightDiff:
    ref_folder: str
    mine_folder: str
    tensors: list[TensorChange] = field(default_factory=list)
    layers: list[LayerChange] = field(default_factory=list)

    @property
    def changed(self) -> list[TensorChange]:
        return [t for t in self.tensors if t.status != "same"]


def layer_of(name: str) -> int | None:
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def diff_weights(ref_folder: str | Path, mine_folder: str | Path, ref_files=None, mine_files=None,
                 judge_heads: tuple[int, ...] | None = None) -> WeightDiff:
    """ref_files / mine_files: the loaded models' weight files (a GGUF's HF-named view), else read from the folders.
    judge_heads: one side is a conversion of the other (a GGUF): judge each changed tensor as quantization error
    or a structural fault (diff/quantization.py), q/k rows checked for RoPE permutations of these head counts."""
    ref = ref_files if ref_files is not None else WeightFiles(Path(ref_folder))
    mine = mine_files if mine_files is not None else WeightFiles(Path(mine_folder))
    out = WeightDiff(str(ref_folder), str(mine_folder))
    mine_names = set(mine.names())
    for name in ref.names():
        if name not in mine_names:
            out.tensors.append(TensorChange(name, "only-ref", ref_dtype=ref.storage_dtype(name)))
            continue
        out.tensors.append(tensor_change(name, ref, mine, judge_heads))
    ref_names = set(ref.names())
    out.tensors += [TensorChange(n, "only-mine", mine_dtype=mine.storage_dtype(n)) for n in mine.names() if n not in ref_names]
    out.layers = layer_changes(out.tensors)
    return out


def tensor_change(name: str, ref: WeightFiles, mine: WeightFiles, judge_heads: tuple[int, ...] | None = None) -> TensorChange:
    a, b = ref.get(name), mine.get(name)
    t = TensorChange(name, "same", tuple(a.shape), tuple(b.shape), ref.storage_dtype(name), mine.storage_dtype(name))
    if a.shape != b.shape:
        t.status = "shape"
        return t
    if np.array_equal(a, b):  # the common case: bit-identical, no float64 copies needed
        t.ref_norm_sq = _norm_sq(a)
        return t
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    delta = (b64 - a64).ravel()
    t.status = "changed"
    t.ref_norm_sq = float(np.dot(a64.ravel(), a64.ravel()))
    t.delta_norm_sq = float(np.dot(delta, delta))
    t.max_abs = float(np.max(np.abs(delta))) if delta.size else 0.0
    t.rel_change = math.sqrt(t.delta_norm_sq / t.ref_norm_sq) if t.ref_norm_sq > 0 else math.inf
    if judge_heads is not None:
        from dataclasses import asdict

        from tracer.diff.quantization import coarser, judge_tensor

        qtype = coarser(t.ref_dtype, t.mine_dtype)
        converted, original = (a, b) if qtype == t.ref_dtype else (b, a)
        t.quant = asdict(judge_tensor(name, converted, original, qtype, judge_heads))
        t.quant["max_abs"] = t.max_abs
    return t


def _norm_sq(a: np.ndarray) -> float:
    flat = a.astype(np.float64).ravel() if a.dtype.kind in "fc" else a.ravel().astype(np.float64)
    return float(np.dot(flat, flat))


def layer_changes(tensors: list[TensorChange]) -> list[LayerChange]:
    """Per numbered layer (and one row for everything else), most changed first."""
    groups: dict[int | None, list[TensorChange]] = {}
    for t in tensors:
        groups.setdefault(t.layer, []).append(t)
    rows = []
    for layer, members in groups.items():
        ref_sq = sum(t.ref_norm_sq for t in members)
        delta_sq = sum(t.delta_norm_sq for t in members)
        structural = any(t.status in ("shape", "only-ref", "only-mine") for t in members)
        rel = math.inf if structural else (math.sqrt(delta_sq / ref_sq) if ref_sq > 0 else (math.inf if delta_sq else 0.0))
        changed = [t for t in members if t.status != "same"]
        top = max(changed, key=lambda t: t.rel_change if t.status == "changed" else math.inf, default=None)
        rows.append(LayerChange(layer, rel, len(changed), len(members), top.name if top else None))
    return sorted(rows, key=lambda r: (-r.rel_change, -1 if r.layer is None else r.layer))
