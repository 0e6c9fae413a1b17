"""Broadcast a mask onto [B,H,Q,K] step by step, saying which role each input axis lands on.

Right alignment (NumPy, torch, JAX, MLX) pads missing leading axes with 1; that is where a
(B,L,S) mask quietly lands its batch axis on the heads. The helpers here never broadcast
silently: each op is recorded, and a mask that cannot land raises TracerError with the
framework's own words.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tracer.errors import TracerError
from tracer.masks.canon import Builder
from tracer.masks.result import ROLES, fmt_shape


def roles_right_aligned(ndim: int, rank: int = 4) -> tuple[str, ...]:
    """The score role of each input axis when a rank-`ndim` mask is right-aligned to rank 4."""
    return tuple(ROLES[rank - ndim + i] for i in range(ndim))


def first_mismatch(mask_shape: tuple[int, ...], score_shape: tuple[int, ...]) -> int | None:
    """Index (in the 4-D frame) of the highest axis where sizes clash, as torch's infer_size reports it."""
    padded = (1,) * (len(score_shape) - len(mask_shape)) + tuple(mask_shape)
    for i in range(len(score_shape) - 1, -1, -1):
        if padded[i] not in (1, score_shape[i]):
            return i
    return None


def torch_broadcast_error(mask_shape, score_shape) -> str:
    """torch's text for a mask that cannot broadcast onto the scores (a = scores, b = mask)."""
    if len(mask_shape) > len(score_shape):
        try:
            shown = np.broadcast_shapes(tuple(mask_shape), tuple(score_shape))
        except ValueError:
            shown = tuple(mask_shape)
        return f"output with shape {fmt_list(score_shape)} doesn't match the broadcast shape {fmt_list(shown)}"
    i = first_mismatch(mask_shape, score_shape)
    padded = (1,) * (len(score_shape) - len(mask_shape)) + tuple(mask_shape)
    if i is None:  # the shapes broadcast; the caller refuses them for another reason
        return f"a mask of shape {fmt_list(mask_shape)} is not accepted for scores {fmt_list(score_shape)}"
    return (f"The size of tensor a ({score_shape[i]}) must match the size of tensor b ({padded[i]}) "
            f"at non-singleton dimension {i}")


def fmt_list(shape) -> str:
    return "[" + ", ".join(str(int(n)) for n in shape) + "]"


def right_align(b: Builder, mask: np.ndarray, reject: Callable[[str], TracerError], framework: str,
                check_axes: bool = True) -> np.ndarray:
    """Right-align `mask` to rank 4 and broadcast it onto the scores, recording both steps.

    `reject(reason)` builds the framework's error for a mask that cannot land.
    """
    shape = tuple(mask.shape)
    score = b.shape
    if mask.ndim > 4:
        raise reject(f"a {mask.ndim}-D mask cannot broadcast onto the 4-D scores {fmt_shape(score)}")
    roles = roles_right_aligned(mask.ndim)
    if check_axes:
        warn_misaligned_axes(b, mask, roles, framework)
    if first_mismatch(shape, score) is not None:
        i = first_mismatch(shape, score)
        padded = (1,) * (4 - mask.ndim) + shape
        raise reject(f"mask {fmt_shape(shape)} right-aligns to {fmt_shape(padded)}; its size {padded[i]} lands on "
                     f"{ROLES[i]}={score[i]}")
    aligned = mask.reshape((1,) * (4 - mask.ndim) + shape)
    if mask.ndim < 4:
        b.step("right-align", shape, aligned.shape, roles, note=landing_note(shape, roles, b.shape))
    if aligned.shape != score:
        b.step("broadcast", aligned.shape, score, roles_right_aligned(4))
    return np.broadcast_to(aligned, score)


def landing_note(shape, roles, score) -> str | None:
    """Flag an axis whose size matches B but lands elsewhere: the usual sign of a (B,L,S) mistake."""
    B = score[0]
    for i, (n, r) in enumerate(zip(shape, roles)):
        if r != "B" and n == B and n > 1 and i == 0 and len(shape) in (2, 3):
            return f"dim0 size{n} lands on {r}, not B"
    return None


def warn_misaligned_axes(b: Builder, mask: np.ndarray, roles, framework: str) -> None:
    """ML006: a rank-3 mask whose dim0 equals B lands on heads; a (B,K) padding mask lands on queries."""
    B, H, Q, K = b.shape
    shape = mask.shape
    if mask.ndim == 3 and shape[0] == B and B > 1:
        fix = "m[:, None]" + (f" -> ({B},1,{shape[1]},{shape[2]})")
        b.warn("ML006", f"{framework} right-aligns the 3-D mask {fmt_shape(shape)}: its dim0 (size {B}) lines up "
               f"with HEADS, not batch{' (silently, because H == B)' if H == B else ''}; if dim0 is the batch, use {fix}",
               lands_on="H")
    if mask.ndim == 2 and shape[0] == B and B > 1 and shape[0] == Q and looks_like_padding_rows(mask):
        keep = keep_view(mask)
        causal = (keep == np.tri(Q, shape[1], shape[1] - Q, dtype=bool)).all()  # also a bottom-right causal mask
        b.warn("ML006", f"the 2-D mask {fmt_shape(shape)} has {B} rows like a (B,K) padding mask, but right-alignment "
               f"reads its rows as QUERIES (silently, because Q == B); use m[:, None, None, :] -> ({B},1,1,{K})"
               + (" (if it is a bottom-right causal mask of the queries, it is read as meant)" if causal else ""),
               lands_on="Q")


def looks_like_padding_rows(mask: np.ndarray) -> bool:
    """Rows shaped like padding: left padding (a row blocked, then kept: a causal mask never starts a row so),
    or right padding (every row kept, then blocked, some row blocked at the end) that is not the top-left causal
    mask of its own shape (tril: row q keeps q + 1 keys)."""
    keep = keep_view(mask)
    rows = keep.reshape(-1, keep.shape[-1])
    for row in rows:
        if not row[0] and row.any() and row[np.argmax(row):].all():
            return True
    if keep.ndim != 2:
        return False
    kept = rows.sum(axis=1)
    prefix = all(row[:n].all() and not row[n:].any() for row, n in zip(rows, kept))
    top_left_causal = (keep == np.tri(*keep.shape, dtype=bool)).all()
    return bool(prefix and kept.min() > 0 and (kept < keep.shape[1]).any() and not top_left_causal)


def keep_view(mask: np.ndarray, soft_threshold: float = -1e4) -> np.ndarray:
    """Best-effort keep reading of any mask: bool as is; numbers with negatives read as additive
    (finite and above the soft threshold keeps), otherwise as 0/1 (nonzero keeps)."""
    if mask.dtype == bool:
        return mask
    m = mask.astype(np.float64)
    if (m < 0).any():
        return np.isfinite(m) & (m > soft_threshold)
    return m != 0


def expand_heads_by_modulo(b: Builder, mask4: np.ndarray, axis: int, size: int, why: str) -> np.ndarray:
    """ggml broadcast: slice i of the target uses mask slice i % n (n must divide the target size)."""
    n = mask4.shape[axis]
    if n == size:
        return mask4
    if size % n:
        raise TracerError(f"ggml cannot broadcast the mask: {ROLES[axis]}={size} is not a multiple of the mask's {n} "
                          f"({why})", hint="ggml_soft_max_ext asserts ne[2] % mask->ne[2] == 0")
    idx = np.arange(size) % n
    out = np.take(mask4, idx, axis=axis)
    if n > 1:
        b.step(f"tile {ROLES[axis]} by modulo ({ROLES[axis].lower()} uses slice {ROLES[axis].lower()} % {n})",
               mask4.shape, out.shape, roles_right_aligned(4))
    return out
