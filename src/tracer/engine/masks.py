"""The keep-masks the engine applies. True = the query may attend to the key.

Masks are built in cache-index space: query i sits at key slot i + past, so
with a KV cache (q_len < kv_len) causality is aligned bottom-right, as in
transformers and FlashAttention >= 2.1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def causal_keep(q_len: int, kv_len: int, past: int = 0) -> np.ndarray:
    """[q_len, kv_len]: key j visible from query i iff j <= i + past."""
    q = np.arange(q_len)[:, None] + past
    k = np.arange(kv_len)[None, :]
    return k <= q


def window_keep(q_len: int, kv_len: int, window: int, past: int = 0) -> np.ndarray:
    """[q_len, kv_len]: sliding window of `window` keys including the query's own: j > i + past - window."""
    q = np.arange(q_len)[:, None] + past
    k = np.arange(kv_len)[None, :]
    return k > q - window


def padding_keep(attention_mask: np.ndarray) -> np.ndarray:
    """[batch, 1, 1, kv_len] from a [batch, kv_len] 1/0 mask (1 = real token)."""
    return (attention_mask != 0)[:, None, None, :]


def positions_from_mask(attention_mask: np.ndarray) -> np.ndarray:
    """cumsum(mask) - 1 with pads at 0: real tokens count from 0 whichever side the padding is on."""
    return np.where(attention_mask != 0, np.cumsum(attention_mask, axis=1) - 1, 0).astype(np.int64)


def index_positions(attention_mask: np.ndarray) -> np.ndarray:
    """0..n-1 on every row, padding or not (BERT, BART): left padding shifts the real tokens' positions."""
    return np.broadcast_to(np.arange(attention_mask.shape[1], dtype=np.int64), attention_mask.shape).copy()


def positions_by_rule(attention_mask: np.ndarray, rule: str) -> np.ndarray:
    """Position ids under a family's rule: "mask" (cumsum(mask) - 1) or "index" (0..n-1)."""
    if rule == "index":
        return index_positions(attention_mask)
    if rule == "mask":
        return positions_from_mask(attention_mask)
    raise ValueError(f"unknown position rule {rule!r}")


@dataclass(frozen=True)
class MaskParts:
    """How one layer's mask was built, kept for explanation: each part and their AND."""

    causal: np.ndarray | None  # [q, kv]
    window: np.ndarray | None  # [q, kv]
    padding: np.ndarray  # [batch, 1, 1, kv]
    keep: np.ndarray  # [batch, 1, q, kv]
    window_size: int | None


def build_keep(attention_mask: np.ndarray, causal: bool, window: int | None, q_len: int, past: int = 0) -> MaskParts:
    kv_len = attention_mask.shape[1]
    pad = padding_keep(attention_mask)  # [batch, 1, 1, kv]
    keep = pad
    c = causal_keep(q_len, kv_len, past) if causal else None
    w = window_keep(q_len, kv_len, window, past) if window is not None else None
    for part in (c, w):
        if part is not None:
            keep = keep & part[None, None]  # -> [batch, 1, q, kv]
    keep = np.broadcast_to(keep, (attention_mask.shape[0], 1, q_len, kv_len))
    return MaskParts(c, w, pad, keep, window)
