"""Dequantizing ggml blocks to float32: a one-pass NumPy path for the common types (Q8_0, Q4_0, BF16, F16),
`gguf.quants.dequantize` for every other. The fast paths do the same float32 arithmetic in the same order
(scale as f16 -> f32, times the integer as f32), so their output is bit-identical to gguf's (tested); they
only skip its intermediate arrays, which made a Q8_0 matrix 2-3x slower to read than a bf16 one."""

from __future__ import annotations

import numpy as np


def dequantize(data: np.ndarray, qtype, gguf) -> np.ndarray:
    """Raw tensor data as the gguf reader gives it (bytes [..., row_bytes] for block types) -> float32."""
    fast = _FAST.get(qtype.name)
    if fast is not None:
        return fast(np.ascontiguousarray(data))
    return gguf.quants.dequantize(data, qtype).astype(np.float32, copy=False)


def _scales(blocks: np.ndarray) -> np.ndarray:
    return blocks[:, :2].copy().view(np.float16).astype(np.float32)  # [n_blocks, 1]


def _q8_0(data: np.ndarray) -> np.ndarray:
    """34-byte blocks: f16 scale d, 32 int8 q; x = d * q."""
    blocks = data.reshape(-1, 34)
    out = np.multiply(blocks[:, 2:].view(np.int8), _scales(blocks), dtype=np.float32)  # [n_blocks, 32]
    return out.reshape(*data.shape[:-1], -1)


def _q4_0(data: np.ndarray) -> np.ndarray:
    """18-byte blocks: f16 scale d, 16 bytes of nibbles (low nibbles are values 0..15, high 16..31); x = d * (q - 8)."""
    blocks = data.reshape(-1, 18)
    qs = blocks[:, 2:]
    out = np.empty((blocks.shape[0], 32), np.float32)
    np.subtract((qs & 0x0F).view(np.int8), 8, out=out[:, :16], dtype=np.float32)
    np.subtract((qs >> 4).view(np.int8), 8, out=out[:, 16:], dtype=np.float32)
    out *= _scales(blocks)
    return out.reshape(*data.shape[:-1], -1)


def _bf16(data: np.ndarray) -> np.ndarray:
    return np.left_shift(data.view(np.uint16), 16, dtype=np.uint32).view(np.float32)  # exact


def _f16(data: np.ndarray) -> np.ndarray:
    return data.astype(np.float32)  # exact


_FAST = {"Q8_0": _q8_0, "Q4_0": _q4_0, "BF16": _bf16, "F16": _f16}
