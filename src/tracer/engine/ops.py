"""Elementwise and normalisation steps, one function per piece of math.

Constants are Python floats on purpose: a NumPy float64 scalar would silently
promote float32 arrays to float64 (NumPy 2 promotion) and triple the cost.
"""

from __future__ import annotations

import math

import numpy as np

from tracer.engine.ports import Weights
from tracer.threads import in_halves


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """x @ w + b with w stored [in, out]; the bias added in place, half the rows on each core (tracer.threads)."""
    y = x @ w  # [..., in] @ [in, out] -> [..., out]
    if b is not None:
        rows = y.reshape(-1, y.shape[-1])  # a view: the product is a new C-contiguous array
        in_halves(lambda r0, r1: np.add(rows[r0:r1], b, out=rows[r0:r1]), rows.shape[0], y.nbytes)
    return y


def affine_op(x: str, which: str, W: Weights, prefix: str) -> str:
    """The op text of a projection, with its bias only when the checkpoint has one: 'x @ W_q + b_q'."""
    return f"{x} @ W_{which}" + (f" + b_{which}" if prefix + f"b_{which}" in W else "")


def layer_norm(x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * w + b over the last axis, row by row (by_rows)."""
    return by_rows(lambda rows, out: _layer_norm_into(rows, w, b, eps, out), x)


def _layer_norm_into(x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None, eps: float, out: np.ndarray) -> None:
    mean = x.mean(axis=-1, keepdims=True)  # [rows, 1]
    centred = np.subtract(x, mean, out=out)
    var = np.mean(centred * centred, axis=-1, keepdims=True)  # biased variance, as torch
    np.divide(centred, np.sqrt(var + eps), out=out)
    if w is not None:
        out *= w
    if b is not None:
        out += b


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float, offset: float = 0.0) -> np.ndarray:
    """x / rms(x) * (offset + w); offset 1 is Gemma's `x * (1 + w)`. Row by row (by_rows)."""
    scale = w + offset if offset else w
    return by_rows(lambda rows, out: _rms_norm_into(rows, scale, eps, out), x)


def _rms_norm_into(x: np.ndarray, scale: np.ndarray, eps: float, out: np.ndarray) -> None:
    ms = np.mean(np.multiply(x, x, out=out), axis=-1, keepdims=True)  # [rows, 1]
    np.divide(x, np.sqrt(ms + eps), out=out)
    out *= scale


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    """Soft-capping (gemma2): tanh(x / cap) * cap, smooth and bounded by +-cap; order as transformers."""
    return np.tanh(x / cap) * cap


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (GPT-2's gelu_new, Gemma's gelu_pytorch_tanh):
    0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2 / pi)."""
    return by_rows(_gelu_tanh_into, x)


def _gelu_tanh_into(x: np.ndarray, out: np.ndarray) -> None:
    """In two arrays, in place: the same operations on the same operands in the same order as the expression
    (a * b and b * a round alike), so the same bits, with one temporary instead of eight."""
    c = math.sqrt(2.0 / math.pi)
    inner = np.multiply(x, x)
    inner *= x  # x^3
    inner *= 0.044715
    np.add(x, inner, out=inner)
    inner *= c
    np.tanh(inner, out=inner)
    inner += 1.0
    np.multiply(x, 0.5, out=out)
    out *= inner  # (0.5 x) * (1 + tanh(...))


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """GELU with the exact error function: 0.5 x (1 + erf(x / sqrt 2))."""
    return by_rows(_gelu_erf_into, x)


def _gelu_erf_into(x: np.ndarray, out: np.ndarray) -> None:
    erf(x * (1.0 / math.sqrt(2.0)), out=out)
    out += 1.0
    out *= x
    out *= 0.5


def silu(x: np.ndarray) -> np.ndarray:
    """x / (1 + exp(-x))."""
    return by_rows(_silu_into, x)


def _silu_into(x: np.ndarray, out: np.ndarray) -> None:
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += 1.0
    np.divide(x, out, out=out)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


def by_rows(into, x: np.ndarray, piece_bytes: int | None = None) -> np.ndarray:
    """into(x_rows, out_rows) over the rows of x (its last axis whole): a new float array of x's shape. The rows
    are split over two threads when those are on (tracer.threads), and each thread takes its rows a piece of
    about `piece_bytes` (_PIECE_BYTES, 1 MiB) at a time, so an activation's many passes read the cache instead
    of memory (GELU with erf over 2,048 x 3,072: 38 against 72 ms; 512 rows: 8.2 against 10.2 ms). Each
    element's operations are the same whichever thread and piece compute it, so the numbers do not depend on
    the split."""
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    out = np.empty(x.shape, x.dtype)
    if x.ndim == 0 or not x.flags.c_contiguous:
        into(x, out)
        return out
    xr, outr = x.reshape(-1, x.shape[-1]), out.reshape(-1, x.shape[-1])  # views: [rows, last]
    piece = _PIECE_BYTES if piece_bytes is None else piece_bytes
    step = max(1, piece // max(1, x.shape[-1] * x.itemsize))

    def rows_of(r0: int, r1: int) -> None:
        for r in range(r0, r1, step):
            into(xr[r : min(r + step, r1)], outr[r : min(r + step, r1)])

    in_halves(rows_of, xr.shape[0], x.nbytes)
    return out


_PIECE_BYTES = 1 << 20  # an activation's piece of rows (measured: 0.5-1 MiB best, 2,048 x 3,072 twice as fast)

ACTIVATIONS = {"gelu_tanh": gelu_tanh, "gelu": gelu_erf, "silu": silu, "relu": relu}


def erf(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Vectorised erf (into `out` when given, of x's shape and dtype). float64: math.erf per element (exact to
    an ulp). float32: a rational approximation with max abs error 1.2e-7 (Numerical Recipes erfc), below
    float32 resolution."""
    if x.dtype == np.float64:
        exact = _erf_exact(x).astype(np.float64)
        if out is None:
            return exact
        out[...] = exact
        return out
    t = np.abs(x)
    t *= 0.5
    t += 1.0
    np.reciprocal(t, out=t)  # t = 1 / (1 + |x| / 2)
    poly = np.full_like(t, _ERFC_POLY[-1])
    for c in reversed(_ERFC_POLY[:-1]):  # Horner, in place: one pass per coefficient, no temporaries
        poly *= t
        poly += c
    erfc = np.multiply(x, x, out=out)
    np.negative(erfc, out=erfc)
    erfc += poly
    np.exp(erfc, out=erfc)
    erfc *= t  # erfc(|x|) = t exp(-x^2 + poly(t))
    np.subtract(1.0, erfc, out=erfc)
    return np.copysign(erfc, x, out=erfc)  # erf(x) = sign(x) (1 - erfc(|x|))


_ERFC_POLY = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
              -0.82215223, 0.17087277)


_erf_exact = np.frompyfunc(math.erf, 1, 1)


def mask_blocked(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """np.where(keep, x, -inf) as a new array of x's dtype (keep broadcastable to x), computed as x + bias with
    bias = 0 where kept, -inf where blocked, made on keep's own shape: one pass over x where np.where with a
    broadcast mask and a scalar is several times slower (1.7 ms against 0.3 ms on a [12, 341, 512] block).
    The same numbers: x + 0 = x and x + -inf = -inf, but for NaN and +inf in x (NaN + -inf is NaN, +inf + -inf
    is NaN), so a part of x holding either takes np.where itself; -0.0 + 0 gives +0.0, the same value. Scores
    [batch, heads, q, kv] run half of their heads on each core when two threads are on (tracer.threads)."""
    if keep.size >= x.size or not x.size:
        return np.where(keep, x, -np.inf).astype(x.dtype, copy=False)
    bias = np.where(keep, x.dtype.type(0.0), x.dtype.type(-np.inf))  # [.., 1 | heads, q, kv]: keep's shape
    out = np.empty(x.shape, x.dtype)
    if x.ndim != 4 or keep.ndim != 4:
        _mask_into(x, keep, bias, out)
        return out
    per_head = keep.shape[1] != 1  # a mask of its own per head (an override): cut with the heads

    def heads(h0: int, h1: int) -> None:
        k, b = (keep[:, h0:h1], bias[:, h0:h1]) if per_head else (keep, bias)
        _mask_into(x[:, h0:h1], k, b, out[:, h0:h1])

    in_halves(heads, x.shape[1], x.nbytes)
    return out


def _mask_into(x: np.ndarray, keep: np.ndarray, bias: np.ndarray, out: np.ndarray) -> None:
    hi = float(x.max())
    if math.isnan(hi) or hi == math.inf:
        np.copyto(out, np.where(keep, x, -np.inf), casting="unsafe")
    else:
        np.add(x, bias, out=out, dtype=x.dtype)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Stable softmax; a row that is entirely -inf (fully masked) gives zeros, not NaN.

    Over the last axis, row by row (by_rows): the rows split over two threads when those are on, a piece of
    4 MiB at a time, so each row's five passes over the logits [batch, pos, vocab] read the cache instead of
    memory (GPT-2's 512 x 50,257 logits: 66 against 83 ms on one thread). Each row is computed alone either
    way, so the numbers are the same."""
    if axis not in (-1, x.ndim - 1):
        return _softmax_into(x, np.empty(x.shape, x.dtype), axis)
    return by_rows(lambda rows, out: _softmax_into(rows, out, -1), x, _SOFTMAX_PIECE_BYTES)


_SOFTMAX_PIECE_BYTES = 4 * 2**20  # rows of a piece: a few MiB stay in L2/L3 (measured: 8-16 logits rows best)


def _softmax_into(x: np.ndarray, e: np.ndarray, axis: int) -> np.ndarray:
    """softmax(x) written into e (e may not be x)."""
    m = np.max(x, axis=axis, keepdims=True)
    m[~np.isfinite(m)] = 0.0
    np.subtract(x, m, out=e)
    np.exp(e, out=e)
    s = np.sum(e, axis=axis, keepdims=True)
    s[s == 0] = 1.0
    e /= s
    return e
