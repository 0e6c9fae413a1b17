"""Rotary position embeddings, half-split layout (transformers' `rotate_half`)."""

from __future__ import annotations

import math

import numpy as np

from tracer.arch.spec import RopeSpec


def inverse_frequencies(rope: RopeSpec, dtype=np.float32) -> np.ndarray:
    """inv_freq[j] = theta^(-2j/rotary_dim), with optional linear or llama3 scaling.

    Same operation order as transformers, in the compute dtype: float32 matches
    transformers bit for bit; float64 matches its rotary code rerun in float64.
    """
    f = np.dtype(dtype).type
    dim = rope.rotary_dim
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(dtype) / f(dim)  # [dim/2]
    inv_freq = f(1.0) / np.power(f(rope.theta), exponents)
    if rope.scaling == "linear":
        inv_freq = inv_freq / f(rope.factor)
    elif rope.scaling == "llama3":
        inv_freq = _llama3_scaled(inv_freq, rope)
    return inv_freq


def _llama3_scaled(inv_freq: np.ndarray, rope: RopeSpec) -> np.ndarray:
    """Llama 3.1: long wavelengths divided by `factor`, short kept, a smooth blend between."""
    f = inv_freq.dtype.type
    old_len = f(rope.original_max_positions)
    low_wavelen = old_len / f(rope.low_freq_factor)
    high_wavelen = old_len / f(rope.high_freq_factor)
    wavelen = f(2 * math.pi) / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / f(rope.factor), inv_freq)
    smooth = (old_len / wavelen - f(rope.low_freq_factor)) / f(rope.high_freq_factor - rope.low_freq_factor)
    blended = (f(1.0) - smooth) * scaled / f(rope.factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, blended, scaled)


def cos_sin(positions: np.ndarray, inv_freq: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables [batch, 1, pos, rotary_dim] for the given position ids."""
    angles = positions[..., None].astype(dtype) * inv_freq  # [batch, pos, rotary_dim/2]
    angles = np.concatenate([angles, angles], axis=-1)  # [batch, pos, rotary_dim]
    return np.cos(angles)[:, None], np.sin(angles)[:, None]  # [batch, 1, pos, rotary_dim]


def rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rotary(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate the first rotary_dim features of every head; the rest pass through (partial rotary)."""
    rot = cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]  # [batch, heads, pos, rot], [.., d_head - rot]
    rotated = x_rot * cos + rotate_half(x_rot) * sin
    return rotated if x_pass.shape[-1] == 0 else np.concatenate([rotated, x_pass], axis=-1)
