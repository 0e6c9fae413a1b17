"""Rearranging a foreign tensor into the axes tracer records a step with.

A layout is a named function `(array, target_shape) -> array`; the target
shape is the reference step's, so sizes such as heads and d_head come from
the reference instead of a config. Every rearrangement is reported next to the
step it was applied to, so nothing is silently reshaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

Shape = tuple[int, ...]

# An additive attention mask blocks a cell with a huge negative number (the
# dtype's minimum, or -inf); anything at or below this counts as blocked.
ADDITIVE_BLOCKED = -1e4


@dataclass(frozen=True)
class Layout:
    note: str  # shown to the user, e.g. "[batch, pos, head, d_head] -> [batch, head, pos, d_head]"
    fn: Callable[[np.ndarray, Shape | None], np.ndarray]

    def apply(self, array: np.ndarray, target: Shape | None) -> np.ndarray:
        return self.fn(array, target)


AS_IS = Layout("", lambda a, target: a)


def transpose(perm: tuple[int, ...], note: str | None = None) -> Layout:
    """Permute axes: tracer's axis k is the foreign axis perm[k]."""
    perm = tuple(int(p) for p in perm)

    def fn(a: np.ndarray, target: Shape | None) -> np.ndarray:
        return a.transpose(perm) if a.ndim == len(perm) else a  # wrong rank: left for the shape check to report

    return Layout(note or f"axes permuted {perm}", fn)


HEADS_SECOND = transpose((0, 2, 1, 3), "[batch, pos, head, d_head] -> [batch, head, pos, d_head]")


def _split_heads(a: np.ndarray, target: Shape | None) -> np.ndarray:
    """[batch, pos, heads*d_head] -> [batch, heads, pos, d_head], sizes from the target. A value already
    split but positions first, [batch, pos, heads, d_head], is transposed (an ONNX export can fold the
    head merge into the next projection, so only the split value exists there)."""
    if target is None or len(target) != 4 or a.ndim not in (3, 4):
        return a
    batch, heads, pos, d_head = target
    if a.ndim == 4:
        return a.transpose(0, 2, 1, 3) if a.shape == (batch, pos, heads, d_head) else a
    if a.shape != (batch, pos, heads * d_head):
        return a
    return a.reshape(batch, pos, heads, d_head).transpose(0, 2, 1, 3)


SPLIT_HEADS = Layout("[batch, pos, heads*d_head] split into [batch, heads, pos, d_head]", _split_heads)


def _unflatten_positions(a: np.ndarray, target: Shape | None) -> np.ndarray:
    """[batch*pos, features] -> [batch, pos, features] (OPT runs its MLP on flattened rows)."""
    if target is None or len(target) != 3 or a.ndim != 2 or a.shape != (target[0] * target[1], target[2]):
        return a
    return a.reshape(target)


UNFLATTEN_POSITIONS = Layout("[batch*pos, features] -> [batch, pos, features]", _unflatten_positions)


def _additive_to_keep(a: np.ndarray, target: Shape | None) -> np.ndarray:
    if a.dtype == np.bool_:
        return a
    return a > ADDITIVE_BLOCKED if a.dtype.kind == "f" else a != 0


ADDITIVE_TO_KEEP = Layout(f"additive mask -> keep-mask (cells <= {ADDITIVE_BLOCKED:g} are blocked)", _additive_to_keep)


def fused_qkv_part(part: str, scheme: str, heads: int, kv_heads: int) -> Layout:
    """q, k or v out of a fused projection [batch, pos, ...] as [batch, heads, pos, d_head].

    scheme "blocks": [q (heads*d) ; k (kv*d) ; v (kv*d)] on the last axis (gpt2, phi3);
    scheme "per_head": [h0: q k v, h1: q k v, ...] (gpt_neox).
    """

    def fn(a: np.ndarray, target: Shape | None) -> np.ndarray:
        if target is None or a.ndim != 3:
            return a
        batch, pos = a.shape[:2]
        d_head = target[-1]
        if scheme == "per_head":
            per_head = a.reshape(batch, pos, heads, 3 * d_head)
            i = "qkv".index(part)
            return per_head[..., i * d_head : (i + 1) * d_head].transpose(0, 2, 1, 3)
        widths = {"q": heads * d_head, "k": kv_heads * d_head, "v": kv_heads * d_head}
        start = {"q": 0, "k": widths["q"], "v": widths["q"] + widths["k"]}[part]
        chosen = a[..., start : start + widths[part]]
        return chosen.reshape(batch, pos, -1, d_head).transpose(0, 2, 1, 3)

    return Layout(f"{part} taken out of the fused q/k/v projection ({scheme})", fn)


def fused_half(part: str) -> Layout:
    """gate or up out of a fused [gate; up] projection."""

    def fn(a: np.ndarray, target: Shape | None) -> np.ndarray:
        half = a.shape[-1] // 2
        return a[..., :half] if part == "gate" else a[..., half:]

    return Layout(f"{part} half of the fused gate/up projection", fn)


def then(first: Layout, second: Layout) -> Layout:
    def fn(a: np.ndarray, target: Shape | None) -> np.ndarray:
        return second.apply(first.apply(a, target), target)

    return Layout("; ".join(n for n in (first.note, second.note) if n), fn)


def add_batch_if_missing(a: np.ndarray, target: Shape | None) -> tuple[np.ndarray, str]:
    """A dump written without the batch axis gets it back when that is the only difference."""
    if target is not None and len(target) == a.ndim + 1 and target[0] == 1 and tuple(a.shape) == tuple(target[1:]):
        return a[None], "batch axis added"
    return a, ""


def permutation_to(shape: Shape, target: Shape) -> tuple[int, ...] | None:
    """A non-trivial axis order that turns `shape` into `target`, for a shape-mismatch hint."""
    import itertools

    if len(shape) != len(target) or len(shape) > 5 or sorted(shape) != sorted(target):
        return None
    for perm in itertools.permutations(range(len(shape))):
        if perm != tuple(range(len(shape))) and tuple(shape[p] for p in perm) == tuple(target):
            return perm
    return None
