"""T5's relative position bias: each (query, key) distance falls in a bucket, each bucket has a learned bias per head.

Distances below half the buckets get a bucket each; longer ones share
logarithmically wider buckets up to `max_distance`. The encoder tells the two
directions apart (half the buckets each); the decoder only looks back. The
bias is computed once per stack (by block 0, which owns the table) and added to
the scores of every block.
"""

from __future__ import annotations

import math

import numpy as np

from tracer.arch.spec import RelativeBiasSpec


def relative_positions(q_len: int, kv_len: int, past: int = 0) -> np.ndarray:
    """[q_len, kv_len]: key index - query index (negative = the key is earlier)."""
    q = np.arange(past, past + q_len, dtype=np.int64)[:, None]
    k = np.arange(kv_len, dtype=np.int64)[None, :]
    return k - q


def relative_buckets(rel: np.ndarray, bidirectional: bool, num_buckets: int, max_distance: int) -> np.ndarray:
    """Distance -> bucket index, as Mesh TensorFlow and transformers compute it (log in float32, truncated)."""
    buckets = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0).astype(np.int64) * num_buckets  # later keys use the upper half
        distance = np.abs(rel)
    else:
        distance = -np.minimum(rel, 0)  # later keys (masked anyway) collapse onto distance 0
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    with np.errstate(divide="ignore"):  # log(0) on the small distances, which np.where discards
        scaled = np.log(distance.astype(np.float32) / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    large = max_exact + np.where(is_small, 0, scaled).astype(np.int64)  # .to(long) truncates toward zero
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(is_small, distance, large)


def position_bias(table: np.ndarray, rel: RelativeBiasSpec, bidirectional: bool, q_len: int, kv_len: int,
                  past: int = 0) -> np.ndarray:
    """[1, heads, q_len, kv_len] bias from the learned table [num_buckets, heads]."""
    b = relative_buckets(relative_positions(q_len, kv_len, past), bidirectional, rel.num_buckets, rel.max_distance)
    return table[b].transpose(2, 0, 1)[None]  # [q, k, heads] -> [1, heads, q, k]
