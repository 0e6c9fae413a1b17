"""Masks and biases frameworks build themselves: causal, windows, ALiBi, T5 buckets, position-based.

Every function takes an explicit alignment offset: query i sits at key slot
`i + offset`. offset 0 is top-left (torch is_causal, JAX, Keras, FlashAttention 2.0),
K - Q is bottom-right (FlashAttention >= 2.1, MLX, transformers with a cache).
All return arrays over [Q, K] (or [H, Q, K] for per-head biases).
"""

from __future__ import annotations

import math

import numpy as np

from tracer.errors import TracerError


def query_slots(q_len: int, offset: int) -> np.ndarray:
    """[Q, 1]: the key slot each query row sits at."""
    return np.arange(q_len)[:, None] + offset


def key_slots(kv_len: int) -> np.ndarray:
    """[1, K]"""
    return np.arange(kv_len)[None, :]


def causal_keep(q_len: int, kv_len: int, offset: int) -> np.ndarray:
    """[Q, K]: key j visible from query i iff j <= i + offset."""
    return key_slots(kv_len) <= query_slots(q_len, offset)


def window_keep(q_len: int, kv_len: int, window: int, offset: int) -> np.ndarray:
    """[Q, K]: the last `window` keys including the query's own slot: j > i + offset - window."""
    if window < 1:
        raise TracerError(f"--window {window}: a window holds at least the query's own key (W >= 1)")
    return key_slots(kv_len) > query_slots(q_len, offset) - window


def window_lr_keep(q_len: int, kv_len: int, left: int, right: int, offset: int) -> np.ndarray:
    """[Q, K]: i+offset-left <= j <= i+offset+right, inclusive; -1 means unbounded on that side."""
    q, k = query_slots(q_len, offset), key_slots(kv_len)
    keep = np.ones((q_len, kv_len), dtype=bool)
    if left >= 0:
        keep &= k >= q - left
    if right >= 0:
        keep &= k <= q + right
    return keep


def bidirectional_window_keep(q_len: int, kv_len: int, window: int, offset: int) -> np.ndarray:
    """[Q, K]: transformers' bidirectional sliding overlay, |i+offset - j| <= window (2W+1 keys)."""
    return np.abs(query_slots(q_len, offset) - key_slots(kv_len)) <= window


def positions_keep(q_pos: np.ndarray, k_pos: np.ndarray, causal: bool = True, n_swa: int | None = None) -> np.ndarray:
    """llama.cpp style: [B, Q, K] from token positions [B, Q] and cell positions [B, K] (-1 = empty cell).

    A cell is dropped when it is empty, when p0 > p1 (causal), or when p1 - p0 >= n_swa (standard SWA).
    """
    p1 = q_pos[:, :, None]  # [B, Q, 1]
    p0 = k_pos[:, None, :]  # [B, 1, K]
    keep = np.broadcast_to(p0 >= 0, np.broadcast_shapes(p1.shape, p0.shape)).copy()
    if causal:
        keep &= p0 <= p1
    if n_swa is not None:
        keep &= (p1 - p0) < n_swa
    return keep


# ---------- ALiBi ----------


def alibi_slopes(n_heads: int, max_bias: float = 8.0) -> np.ndarray:
    """[H] the standard ALiBi slopes 2^(-max_bias*(h+1)/H), with the interleave for non-powers of two.

    This is the rule of the ALiBi paper, BLOOM's build_alibi_tensor and ggml's soft_max_ext (max_bias 8).
    """
    if n_heads < 1:
        raise TracerError("ALiBi needs at least one head")
    closest = 2 ** math.floor(math.log2(n_heads))
    base = 2.0 ** (-max_bias / closest)
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != n_heads:
        extra_base = 2.0 ** (-max_bias / (2 * closest))
        slopes += [extra_base ** (2 * i + 1) for i in range(n_heads - closest)]
    return np.array(slopes, dtype=np.float64)


def alibi_bias(slopes: np.ndarray, q_len: int, kv_len: int, offset: int, form: str) -> np.ndarray:
    """[S, Q, K] bias for slopes [S] (S = heads, or batch*heads flattened by the caller).

    fa / ggml: -slope * |i + offset - j|  (FlashAttention alibi_slopes, llama.cpp -|p0-p1| times slope)
    bloom:      slope * j                (key position; equal to fa only up to a per-row constant, and only for j <= i)
    """
    dist = np.abs(query_slots(q_len, offset) - key_slots(kv_len)).astype(np.float64)  # [Q, K]
    if form in ("fa", "ggml"):
        return -slopes[:, None, None] * dist[None]
    if form == "bloom":
        return slopes[:, None, None] * np.broadcast_to(key_slots(kv_len), (q_len, kv_len))[None].astype(np.float64)
    raise TracerError(f"unknown ALiBi form {form!r}", hint="fa, bloom or ggml")


# ---------- T5 relative position buckets ----------


def t5_bucket(relative: np.ndarray, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> np.ndarray:
    """transformers' T5Attention._relative_position_bucket, in NumPy. relative = memory_pos - context_pos."""
    relative = np.asarray(relative, dtype=np.int64)
    buckets = np.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0).astype(np.int64) * num_buckets
        relative = np.abs(relative)
    else:
        relative = -np.minimum(relative, 0)
    max_exact = num_buckets // 2
    is_small = relative < max_exact
    # float32 like torch's relative_position.float(); small distances are never read from `large`, so clamp them
    # to 1 to keep log() finite.
    safe = np.maximum(relative, 1).astype(np.float32)
    scaled = np.log(safe / np.float32(max_exact)) / np.float32(math.log(max_distance / max_exact))
    large = max_exact + (scaled * np.float32(num_buckets - max_exact)).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(is_small, relative, large)


def t5_relative_positions(q_len: int, kv_len: int, past: int) -> np.ndarray:
    """[Q, K] memory_position - context_position, the context offset by the tokens already in the cache."""
    return key_slots(kv_len) - query_slots(q_len, past)


# ---------- flex_attention mask_mod predicates ----------


def flex_predicate_keep(text: str, q_len: int, kv_len: int, offset: int) -> tuple[np.ndarray, list[str]]:
    """A small built-in set of mask_mod predicates, joined with '&': causal, sliding(W), prefix(L), document(ids).

    Returns keep [Q, K] and one description per predicate.
    """
    keep = np.ones((q_len, kv_len), dtype=bool)
    described = []
    q, k = query_slots(q_len, offset), key_slots(kv_len)
    for part in (p.strip() for p in text.split("&")):
        name, _, args = part.partition("(")
        name = name.strip()
        args = args.rstrip(")").strip()
        if name == "causal" and not args:
            keep &= k <= q
            described.append("causal: kv_idx <= q_idx")
        elif name == "sliding":
            w = _int_arg(args, part)
            keep &= (k <= q) & (q - k < w)
            described.append(f"sliding({w}): kv_idx <= q_idx and q_idx - kv_idx < {w}  ({w} keys incl. self)")
        elif name == "prefix":
            n = _int_arg(args, part)
            keep &= (k < n) | (k <= q)
            described.append(f"prefix({n}): kv_idx < {n} or kv_idx <= q_idx  (prefix-LM)")
        elif name == "document":
            items = args.replace(" ", "").split(",")
            if "" in items:  # an empty item is an error, never skipped (as in every list option)
                raise TracerError(f"{part}: item {items.index('') + 1} of the document ids is empty")
            ids = np.array([_int_arg(a, part) for a in items], dtype=np.int64)
            if ids.size != kv_len:
                raise TracerError(f"{part}: document ids need one id per key ({kv_len}), got {ids.size}")
            q_doc = ids[np.clip(np.arange(q_len) + offset, 0, kv_len - 1)][:, None]
            keep &= q_doc == ids[None, :]
            described.append("document(ids): doc[q_idx] == doc[kv_idx]")
        else:
            raise TracerError(
                f"unknown mask_mod predicate {part!r}",
                hint="built in: causal, sliding(W), prefix(L), document(0,0,1,1); join with &",
            )
    return keep, described


def _int_arg(text: str, whole: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise TracerError(f"{whole}: {text!r} is not an integer") from None
