"""Rotary position embeddings, half-split layout (transformers' `rotate_half`)."""

from __future__ import annotations

import math

import numpy as np

from tracer.arch.spec import RopeSpec


def inverse_frequencies(rope: RopeSpec, dtype=np.float32, seq_len: int | None = None) -> np.ndarray:
    """inv_freq[j] = theta^(-2j/rotary_dim), with the checkpoint's scaling.

    Same operation order as transformers, in the compute dtype: float32 matches
    transformers bit for bit; float64 matches its rotary code rerun in float64.
    `seq_len` (largest position id + 1) matters to the length-dependent kinds:
    `dynamic` raises theta past max_positions, `longrope` switches to its long
    factors past original_max_positions.
    """
    f = np.dtype(dtype).type
    dim = rope.rotary_dim
    if rope.scaling == "dynamic":
        return f(1.0) / np.power(_dynamic_theta(rope, f, seq_len), _exponents(dim, dtype))
    if rope.scaling == "yarn":
        return _yarn(rope, dtype)
    if rope.scaling == "longrope":
        long = seq_len is not None and seq_len > rope.original_max_positions
        ext = np.asarray(rope.long_factor if long else rope.short_factor, dtype=dtype)  # [dim/2]
        return f(1.0) / (ext * np.power(f(rope.theta), _exponents(dim, dtype)))
    inv_freq = f(1.0) / np.power(f(rope.theta), _exponents(dim, dtype))
    if rope.scaling == "linear":
        inv_freq = inv_freq / f(rope.factor)
    elif rope.scaling == "llama3":
        inv_freq = _llama3_scaled(inv_freq, rope)
    return inv_freq


def _exponents(dim: int, dtype) -> np.ndarray:
    return np.arange(0, dim, 2, dtype=np.int64).astype(dtype) / np.dtype(dtype).type(dim)  # [dim/2]: 2j/dim


def _dynamic_theta(rope: RopeSpec, f, seq_len: int | None):
    """Dynamic NTK: theta * (factor * n / max - (factor - 1)) ^ (dim / (dim - 2)) once n passes max_positions.

    Within max_positions transformers keeps the frequencies it built at load (Python floats, n = max);
    past it, it recomputes from the length tensor, so in the compute dtype.
    """
    dim, top = rope.rotary_dim, rope.max_positions
    if seq_len is None or seq_len <= top:
        return f(rope.theta * ((rope.factor * top / top) - (rope.factor - 1)) ** (dim / (dim - 2)))
    stretch = f(rope.factor) * f(seq_len) / f(top) - f(rope.factor - 1)
    return f(rope.theta) * np.power(stretch, f(dim / (dim - 2)))


def _yarn(rope: RopeSpec, dtype) -> np.ndarray:
    """YaRN: interpolate (divide by factor) the long wavelengths, keep the short, a linear ramp between."""
    f = np.dtype(dtype).type
    dim = rope.rotary_dim
    pos_freqs = np.power(f(rope.theta), _exponents(dim, dtype))  # [dim/2]
    extrapolated, interpolated = f(1.0) / pos_freqs, f(1.0) / (f(rope.factor) * pos_freqs)
    low, high = yarn_correction_range(rope)
    if low == high:
        high += 0.001  # transformers: avoid a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=dtype) - f(low)) / f(high - low), 0, 1)
    keep = f(1.0) - ramp  # 1: extrapolate (keep), 0: interpolate
    return interpolated * (f(1.0) - keep) + extrapolated * keep


def yarn_correction_range(rope: RopeSpec) -> tuple[float, float]:
    """The dimension indices between which YaRN ramps from keeping to dividing the frequencies."""
    dim, base, length = rope.rotary_dim, rope.theta, rope.original_max_positions

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(length / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


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


def cos_sin(positions: np.ndarray, inv_freq: np.ndarray, dtype: np.dtype,
            attention_factor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables [batch, 1, pos, rotary_dim] for the given position ids (times yarn/longrope's factor)."""
    angles = positions[..., None].astype(dtype) * inv_freq  # [batch, pos, rotary_dim/2]
    angles = np.concatenate([angles, angles], axis=-1)  # [batch, pos, rotary_dim]
    cos, sin = np.cos(angles), np.sin(angles)
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    return cos[:, None], sin[:, None]  # [batch, 1, pos, rotary_dim]


def rope_tables(positions: np.ndarray, rope: RopeSpec, dtype) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [batch, 1, pos, rotary_dim] for a stack's positions, length-dependent scaling included."""
    seq_len = int(positions.max()) + 1 if positions.size else 0  # transformers: max(position_ids) + 1
    return cos_sin(positions, inverse_frequencies(rope, dtype, seq_len), dtype, rope.attention_factor)


def rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rotary(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate the first rotary_dim features of every head; the rest pass through (partial rotary)."""
    rot = cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]  # [batch, heads, pos, rot], [.., d_head - rot]
    rotated = x_rot * cos + rotate_half(x_rot) * sin
    return rotated if x_pass.shape[-1] == 0 else np.concatenate([rotated, x_pass], axis=-1)
