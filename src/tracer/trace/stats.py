"""Summary statistics kept for every step, even when its tensor is not."""

from __future__ import annotations

import math
import threading

import numpy as np

from tracer.threads import in_halves

STAT_KEYS = ("mean", "std", "min", "max", "absmax", "nan", "inf")


def tensor_stats(a: np.ndarray) -> dict[str, float]:
    """mean, std, min, max, abs-max over finite values, plus NaN and Inf counts.

    One fused sweep: per cache-sized chunk, min, max, sum and a sum of squares centred on the chunk's own
    mean (the chunk is read from memory once, the later passes hit the cache), the chunks merged exactly
    (Chan et al.) in float64. Large tensors are split in two halves, one on a second thread (NumPy releases
    the GIL in reductions). Within float32 reassociation of the one-pass-per-statistic result
    (tests/test_stats.py states the tolerance). float16/bfloat16 chunks are widened to float32 (exact),
    integers to float64; booleans (masks) are counted, never widened.
    """
    if a.size == 0:
        return dict.fromkeys(STAT_KEYS, 0.0)
    if a.dtype == np.bool_:
        return _bool_stats(a)
    view = memory_rows(a)  # 1-D, or [rows, width]: a's values in memory order, a view whenever one exists
    work = view.dtype if view.dtype in (np.float32, np.float64) else np.dtype(np.float32 if view.dtype.kind in "fV" else np.float64)
    per = _CHUNK if view.ndim == 1 else max(1, _CHUNK // view.shape[1])  # values (1-D) or rows per chunk
    chunks = -(-view.shape[0] // per)
    parts: dict[int, Moments] = {}  # first chunk -> the moments of a run of chunks from it

    def moments_of(c0: int, c1: int) -> None:
        parts[c0] = _moments(view[c0 * per : c1 * per], per, work)

    in_halves(moments_of, chunks, a.nbytes)  # each half's chunks on a core when two threads are on
    m = _NONE
    for c0 in sorted(parts):
        m = _merge(m, parts[c0])
    n, mean, m2, lo, hi, nan, inf = m
    if n == 0:
        return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0, "absmax": 0.0, "nan": nan, "inf": inf}
    return {"mean": mean, "std": math.sqrt(max(m2 / n, 0.0)), "min": lo, "max": hi, "absmax": max(abs(lo), abs(hi)),
            "nan": nan, "inf": inf}


def memory_rows(a: np.ndarray) -> np.ndarray:
    """a's values in memory order without a copy: 1-D when a is dense in some axis order (a transposed step:
    the heads of q, k, v), else [rows, width] when its last axis is contiguous and the others merge into one
    (a run of columns cut from a wider array: attention scores' keys); a copy only when neither exists."""
    if _dense(a):
        return a.ravel(order="K")  # a view
    lead = [(st, n) for st, n in zip(a.strides[:-1], a.shape[:-1]) if n != 1]
    if a.strides[-1] == a.itemsize and all(st > 0 for st, _ in lead) and all(
            outer == inner * n for (outer, _), (inner, n) in zip(lead, lead[1:])):
        return a.reshape(-1, a.shape[-1])  # a view: the leading axes merge (NumPy copies only when they do not)
    return a.ravel(order="K")  # a copy


def _dense(a: np.ndarray) -> bool:
    """Whether a's values fill one contiguous span in some order of its axes (positive strides)."""
    expect = a.itemsize
    for st, n in sorted((st, n) for st, n in zip(a.strides, a.shape) if n != 1):
        if st != expect:
            return False
        expect *= n
    return True


_CHUNK = 1 << 18  # values per chunk: 1 MiB of float32, cached for the passes after the first (0.5-1 MiB best)
_LOCAL = threading.local()

# (finite count, mean, sum of squared deviations, min, max, NaN count, Inf count) of some values
Moments = tuple[int, float, float, float, float, int, int]
_NONE: Moments = (0, 0.0, 0.0, math.inf, -math.inf, 0, 0)


def _buffer(role: str, dtype: np.dtype, n: int) -> np.ndarray:
    """A scratch array of this thread, reused from call to call (no fresh pages per chunk)."""
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None:
        bufs = _LOCAL.bufs = {}
    b = bufs.get((role, dtype))
    if b is None or b.size < n:
        b = bufs[(role, dtype)] = np.empty(max(n, _CHUNK), dtype)
    return b[:n]


def _moments(view: np.ndarray, per: int, work: np.dtype) -> Moments:
    """The merged moments of `view` (1-D, or [rows, width]), `per` values or rows at a time."""
    acc = _NONE
    size = min(view.size, per * (1 if view.ndim == 1 else view.shape[1]))
    d = _buffer("centred", work, size)
    gather = view.dtype != work or view.ndim == 2  # widen, or copy a chunk of strided rows together
    wide = _buffer("gathered", work, size) if gather else None
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, view.shape[0], per):
            c = view[i : i + per]
            if gather:  # float16/bfloat16 -> float32 and ints -> float64: exact; rows: reductions over a
                w = wide[: c.size].reshape(c.shape)  # strided view run at half speed, a copy first is faster
                np.copyto(w, c, casting="unsafe")
                c = w.reshape(-1)
            acc = _merge(acc, _chunk_moments(c, d[: c.size]))
    return acc


def _chunk_moments(c: np.ndarray, d: np.ndarray) -> Moments:
    """c: float32/float64 values; d: scratch of c's size and dtype."""
    lo, hi = float(c.min()), float(c.max())
    nan = inf = 0
    if not (math.isfinite(lo) and math.isfinite(hi)):  # NaN or Inf (masked scores: -inf): the finite values
        finite = np.isfinite(c)
        if math.isnan(lo) or math.isnan(hi):
            nan = int(np.count_nonzero(np.isnan(c)))
        c = c[finite]  # compacting is faster than a where= on every reduction
        inf = finite.size - c.size - nan
        if c.size == 0:
            return (0, 0.0, 0.0, math.inf, -math.inf, nan, inf)
        lo, hi = float(c.min()), float(c.max())
        d = d[: c.size]
    n = c.size
    total = float(c.sum())
    if not math.isfinite(total):
        total = float(c.sum(dtype=np.float64))  # finite values whose float32 sum overflowed
    mean = total / n
    centre = c.dtype.type(mean)
    np.subtract(c, centre, out=d)  # centring removes the cancellation of E[x^2] - mean^2
    q = float(np.dot(d, d))
    if not math.isfinite(q):  # float32 squares past 3e38: redo in float64
        w = c.astype(np.float64)
        w -= float(centre)
        q = float(np.dot(w, w))
    return (n, mean, q - n * (mean - float(centre)) ** 2, lo, hi, nan, inf)


def _merge(a: Moments, b: Moments) -> Moments:
    """Chan et al.'s pairwise merge of two sets of moments, in float64."""
    na, nb = a[0], b[0]
    n = na + nb
    if nb == 0 or na == 0:
        x = a if nb == 0 else b
        return (x[0], x[1], x[2], min(a[3], b[3]), max(a[4], b[4]), a[5] + b[5], a[6] + b[6])
    delta = b[1] - a[1]
    mean = a[1] + delta * nb / n
    m2 = a[2] + b[2] + delta * delta * na * nb / n
    return (n, mean, m2, min(a[3], b[3]), max(a[4], b[4]), a[5] + b[5], a[6] + b[6])


def _bool_stats(a: np.ndarray) -> dict[str, float]:
    """A boolean tensor as 0/1, counted exactly without a float copy."""
    n = a.size
    ones = int(np.count_nonzero(a))
    p = ones / n
    return {"mean": p, "std": math.sqrt(p * (1.0 - p)), "min": 0.0 if ones < n else 1.0,
            "max": 1.0 if ones else 0.0, "absmax": 1.0 if ones else 0.0, "nan": 0, "inf": 0}


class RunningStats:
    """The statistics of a tensor seen in blocks (e.g. attention scores, a block of query rows at a time),
    merged exactly (Chan et al.'s pairwise mean and variance) into what `tensor_stats` gives for the whole."""

    def __init__(self):
        self.n = 0  # finite values so far
        self.mean = self.m2 = 0.0
        self.lo, self.hi = math.inf, -math.inf
        self.nan = self.inf = 0

    def add(self, block: np.ndarray) -> None:
        self.merge(tensor_stats(block), block.size)

    def merge(self, s: dict[str, float], size: int) -> None:
        """The statistics `s` of `size` more entries (tensor_stats of a block)."""
        self.nan += int(s["nan"])
        self.inf += int(s["inf"])
        n_b = size - int(s["nan"]) - int(s["inf"])
        if n_b == 0:
            return
        n = self.n + n_b
        delta = s["mean"] - self.mean
        self.m2 += s["std"] ** 2 * n_b + delta * delta * self.n * n_b / n
        self.mean += delta * n_b / n
        self.n = n
        self.lo, self.hi = min(self.lo, s["min"]), max(self.hi, s["max"])

    def add_constant(self, value: float, count: int) -> None:
        """`count` more entries all equal to `value` (the blocked cells a block skipped: -inf scores, 0 weights)."""
        if count <= 0:
            return
        if math.isnan(value):
            self.nan += count
        elif math.isinf(value):
            self.inf += count
        else:
            n = self.n + count
            delta = value - self.mean
            self.m2 += delta * delta * self.n * count / n
            self.mean += delta * count / n
            self.n = n
            self.lo, self.hi = min(self.lo, value), max(self.hi, value)

    def result(self) -> dict[str, float]:
        if self.n == 0:
            return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0, "absmax": 0.0, "nan": self.nan, "inf": self.inf}
        return {"mean": self.mean, "std": math.sqrt(max(self.m2 / self.n, 0.0)), "min": self.lo, "max": self.hi,
                "absmax": max(abs(self.lo), abs(self.hi)), "nan": self.nan, "inf": self.inf}
