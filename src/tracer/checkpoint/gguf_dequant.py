"""Dequantizing ggml blocks to float32: a one-pass NumPy path for the common types (Q8_0, Q4_0, BF16, F16),
`gguf.quants.dequantize` for every other. The fast paths do the same float32 arithmetic in the same order
(scale as f16 -> f32, times the integer as f32), so their output is bit-identical to gguf's (tested); they
only skip its intermediate arrays, which made a Q8_0 matrix 2-3x slower to read than a bf16 one."""

from __future__ import annotations

import numpy as np

from tracer.checkpoint.safetensors_file import widen_bf16
from tracer.threads import in_halves

BAND_VALUES = 1 << 20  # values dequantized at a time: gguf's K-quant code makes several temporaries per value


def dequantize(data: np.ndarray, qtype, gguf) -> np.ndarray:
    """Raw tensor data as the gguf reader gives it (bytes [..., row_bytes] for block types) -> float32.

    A large tensor is dequantized a band of rows at a time into one float32 output, so the peak is the output
    plus one band's temporaries, not gguf's temporaries over the whole tensor (a 7B model's 32,000 x 4,096
    head); half of the bands on each core when two threads are on (each holds its own temporaries). Blocks
    never straddle rows, so the result is the same."""
    one = _FAST.get(qtype.name) or (lambda d: gguf.quants.dequantize(d, qtype).astype(np.float32, copy=False))
    rows = data.reshape(-1, data.shape[-1]) if data.ndim >= 2 else data.reshape(1, -1)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    per_row = rows.shape[-1] // size * block if rows.dtype == np.uint8 else rows.shape[-1]
    band = max(1, BAND_VALUES // max(per_row, 1))
    if rows.shape[0] <= band:
        return one(np.ascontiguousarray(data))
    first = one(np.ascontiguousarray(rows[:band]))
    out = np.empty((rows.shape[0], first.shape[-1]), np.float32)
    out[:band] = first

    def bands(b0: int, b1: int) -> None:  # band 0 is done: it gave the output's width
        for start in range(max(b0, 1) * band, min(b1 * band, rows.shape[0]), band):
            out[start:start + band] = one(np.ascontiguousarray(rows[start:start + band]))

    in_halves(bands, -(-rows.shape[0] // band), out.nbytes)  # half of the bands on each core (tracer.threads)
    return out.reshape(*data.shape[:-1], first.shape[-1])


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
    return widen_bf16(data.view(np.uint16))  # exact


def _f16(data: np.ndarray) -> np.ndarray:
    return data.astype(np.float32)  # exact


_FAST = {"Q8_0": _q8_0, "Q4_0": _q4_0, "BF16": _bf16, "F16": _f16}
