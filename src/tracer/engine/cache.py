"""The KV cache: every earlier position's keys and values, so a decoding step computes only the new position.

Per layer, keys (after rotary) and values live in buffers sized for the whole
generation, `[batch, kv_heads, capacity, d_head]`; the first `past` slots are
filled. A step appends its new slots and attends over the filled prefix. Every
row of a batch shares the slot index: a left-padded row simply has masked
slots at the front (the attention mask of the cache, `mask`, remembers them).

Cross-attention in an encoder-decoder model reads the encoder output, which
does not change while decoding: its keys and values are computed at the first
step and reused (`cross_k` / `cross_v`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class LayerCache:
    """One block's cache. k, v: [batch, kv_heads, capacity, d_head]; the first `length` slots are filled."""

    k: np.ndarray
    v: np.ndarray
    length: int = 0
    cross_k: np.ndarray | None = None  # [batch, kv_heads, enc_pos, d_head]
    cross_v: np.ndarray | None = None

    def extend(self, k_new: np.ndarray, v_new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Write the new positions [batch, kv_heads, q, d_head] after the filled ones -> views of all filled slots."""
        start, stop = self.length, self.length + k_new.shape[2]
        if stop > self.k.shape[2]:
            raise ValueError(f"KV cache full: {stop} positions for a capacity of {self.k.shape[2]}")
        self.k[:, :, start:stop] = k_new
        self.v[:, :, start:stop] = v_new
        self.length = stop
        return self.k[:, :, :stop], self.v[:, :, :stop]  # [batch, kv_heads, past + q, d_head]

    @property
    def nbytes(self) -> int:
        """Bytes the filled slots hold (cross-attention keys and values included)."""
        own = 2 * self.k[:, :, : self.length].nbytes
        cross = 0 if self.cross_k is None else self.cross_k.nbytes + self.cross_v.nbytes
        return own + cross


@dataclass
class KVCache:
    """Every block's cache plus the attention mask of the cached slots."""

    layers: list[LayerCache]
    mask: np.ndarray  # [batch, past] int64: 1 = a real token sits in that slot
    memory: np.ndarray | None = None  # encoder-decoder: the encoder output [batch, enc_pos, d_model]
    memory_mask: np.ndarray | None = None  # [batch, enc_pos]
    extras: dict = field(default_factory=dict)

    @property
    def past(self) -> int:
        return self.mask.shape[1]

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.layers)

    def bytes_per_token(self) -> int:
        """Self-attention keys and values one position adds, over all layers and rows."""
        return sum(2 * c.k[:, :, :1].nbytes for c in self.layers)


def empty_cache(batch: int, n_layers: int, n_kv_heads: int, d_head: int, capacity: int, dtype) -> KVCache:
    """A cache for `capacity` positions, nothing filled."""
    shape = (batch, n_kv_heads, capacity, d_head)
    layers = [LayerCache(np.zeros(shape, dtype), np.zeros(shape, dtype)) for _ in range(n_layers)]
    return KVCache(layers, np.zeros((batch, 0), dtype=np.int64))
