"""Is a weight's difference quantization error, or a structural fault of the conversion?

A GGUF tensor dequantized and the folder's original differ by the rounding of the quant type: a relative RMS
error near what re-quantizing the original gives (`gguf.quants` where it quantizes that type; else the block
quants' 1.95 * 2^-bits_per_weight, measured on Gaussian weights for Q4_0..Q8_0). Far beyond it, the tensor is
checked against the faults a converter makes, each of which would leave only quantization error once undone:

    rope-permuted   q/k rows in the wrong order for RoPE (the llama converter's permutation applied or not)
    transposed      a square matrix stored the other way round
    rows permuted   the same rows, in another order (each matched to its nearest)
    offset          every entry moved by one constant (Gemma's stored norm - 1 not undone, or undone twice)
    scaled          every entry multiplied by one constant
    changed         beyond quantization, and none of the above explains it

The logits then get llama.cpp's NMSE band; together: "good: quantization error, no structural fault", or
"structural: blocks.0.attn.q (model.layers.0.self_attn.q_proj.weight rope-permuted)".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

FLOAT_TYPES = ("F64", "F32")
MARGIN = 3.0  # a tensor is within quantization when its error is at most MARGIN x the expected one
EXPLAINED = 0.25  # a fault explains the error when undoing it leaves at most this share of it (or quantization)


@dataclass(frozen=True)
class QuantJudgement:
    name: str
    qtype: str  # the coarser side's storage type
    rel_rms: float  # ||a - b|| / ||b||
    expected: float  # the type's expected relative RMS error
    verdict: str  # same | quantization | structural | changed
    fault: str | None = None  # rope-permuted | transposed | rows permuted | offset | scaled
    detail: str = ""  # e.g. "offset by +1"


def bits_per_weight(qtype: str) -> float | None:
    try:
        import gguf
    except ImportError:
        return None
    t = getattr(gguf.GGMLQuantizationType, qtype, None)
    if t is None or t not in gguf.GGML_QUANT_SIZES:
        return None
    block, size = gguf.GGML_QUANT_SIZES[t]
    return 8 * size / block


def expected_error(b: np.ndarray, qtype: str) -> float:
    """The relative RMS error quantizing b to qtype gives: measured where gguf quantizes it, else estimated."""
    if qtype in FLOAT_TYPES:
        return 0.0
    try:
        import gguf

        t = gguf.GGMLQuantizationType[qtype]
        back = gguf.quants.dequantize(gguf.quants.quantize(b.astype(np.float32), t), t).reshape(b.shape)
        return relative_rms(back, b)
    except Exception:  # not installed, a type gguf cannot quantize, or rows that do not fit its block
        bpw = bits_per_weight(qtype)
        return 1.95 * 2.0 ** -bpw if bpw else 0.1


def relative_rms(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    norm = float(np.dot(b64, b64))
    d = a64 - b64
    err = float(np.dot(d, d))
    return math.sqrt(err / norm) if norm > 0 else (0.0 if err == 0 else math.inf)


def rope_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's permutation of q/k rows (half-split RoPE -> ggml's interleaved pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def candidate_faults(a: np.ndarray, b: np.ndarray, heads: tuple[int, ...]):
    """(fault, detail, a with the fault undone) for each fault that fits a's shape."""
    if a.ndim == 2 and a.shape[0] == a.shape[1]:
        yield "transposed", "", a.T
    for n in heads:
        if a.ndim >= 1 and n > 0 and a.shape[0] % (2 * n) == 0:
            yield "rope-permuted", f"{n} heads", rope_unpermute(a, n)
            yield "rope-permuted", f"{n} heads, the other way", rope_permute(a, n)
    delta = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    c = float(delta.mean()) if delta.size else 0.0
    if c != 0:
        yield "offset", f"by {c:+.4g}", a - np.float32(c)
    bb = float(np.dot(np.asarray(b, np.float64).ravel(), np.asarray(b, np.float64).ravel()))
    if bb > 0:
        s = float(np.dot(np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel())) / bb
        if s != 0 and abs(s - 1) > 1e-3:
            yield "scaled", f"by {s:.4g}", a / np.float32(s)
    if a.ndim == 2 and 1 < a.shape[0] <= MAX_MATCHED_ROWS:
        match = nearest_rows(a, b)
        if not np.array_equal(match, np.arange(a.shape[0])):
            undone = np.empty_like(a)
            undone[match] = a
            yield "rows permuted", "", undone


MAX_MATCHED_ROWS = 16384  # rows matched one by one (through a 32-wide random sketch of each row) up to this many


def nearest_rows(a: np.ndarray, b: np.ndarray, width: int = 32, chunk: int = 1024) -> np.ndarray:
    """For each row of a, the index of the row of b nearest to it, through a random sketch of both. [n]"""
    g = np.random.default_rng(0).standard_normal((a.shape[1], width)).astype(np.float32)
    sa, sb = a.astype(np.float32) @ g, b.astype(np.float32) @ g  # [n, width]
    nb = (sb * sb).sum(axis=1)
    out = np.empty(a.shape[0], dtype=np.int64)
    for i in range(0, a.shape[0], chunk):
        block = sa[i:i + chunk]
        dist = nb[None, :] - 2 * block @ sb.T  # |x - y|^2 up to |x|^2, [chunk, n]
        out[i:i + chunk] = dist.argmin(axis=1)
    return out


def judge_tensor(name: str, a: np.ndarray, b: np.ndarray, qtype: str, heads: tuple[int, ...] = ()) -> QuantJudgement:
    """a: the converted side (dequantized), b: the original; qtype: the coarser storage type of the two."""
    rel = relative_rms(a, b)
    if rel == 0:
        return QuantJudgement(name, qtype, 0.0, 0.0, "same")
    expected = expected_error(b, qtype)
    bound = MARGIN * expected + 1e-6
    if rel <= bound:
        return QuantJudgement(name, qtype, rel, expected, "quantization")
    for fault, detail, undone in candidate_faults(a, b, heads if _rotary(name) else ()):
        if undone.shape == b.shape and relative_rms(undone, b) <= max(bound, EXPLAINED * rel):
            return QuantJudgement(name, qtype, rel, expected, "structural", fault, detail)
    return QuantJudgement(name, qtype, rel, expected, "changed")


def _rotary(name: str) -> bool:
    return any(k in name for k in ("q_proj", "k_proj", "attn_q", "attn_k", "query", "key"))


def coarser(type_a: str | None, type_b: str | None) -> str:
    """The storage type whose rounding dominates: a quant type over a float, the fewer bits over more."""
    def bits(t):
        if t in (None, "F64", "F32"):
            return 64.0 if t == "F64" else 32.0
        return {"F16": 16.0, "BF16": 16.0}.get(t) or bits_per_weight(t) or 8.0

    return min((t for t in (type_a, type_b) if t), key=bits, default="F32")


def overall(judged: list[QuantJudgement], nmse: float | None, band: str | None, first_step_of) -> dict:
    """One verdict for a converted model against its original: a fault first, else the logits' band.
    first_step_of: weight name -> the first step that reads it (or None)."""
    faults = [j for j in judged if j.verdict in ("structural", "changed")]
    quantized = [j for j in judged if j.verdict == "quantization"]
    if faults:
        f = faults[0]
        step = first_step_of(f.name) or f.name
        what = f"{f.fault}{' ' + f.detail if f.detail else ''}" if f.verdict == "structural" else \
            f"{f.rel_rms:.3g} relative error, {f.rel_rms / f.expected:.0f}x its {f.qtype} rounding" if f.expected else \
            f"{f.rel_rms:.3g} relative error in a {f.qtype} tensor"
        level = "structural" if f.verdict == "structural" else "beyond quantization"
        return {"level": level, "passed": False, "step": step, "tensor": f.name, "quantized": len(quantized),
                "line": f"{level}: {step} ({f.name} {what})", "faults": len(faults)}
    if nmse is None:
        return {"level": "quantization", "passed": True, "step": None, "tensor": None, "faults": 0,
                "quantized": len(quantized),
                "line": f"quantization error only ({len(quantized)} tensors), no structural fault"}
    from tracer.diff.verdicts import NMSE_PASS

    passed = nmse < NMSE_PASS
    tail = "quantization error, no structural fault" if quantized else "no weight differs"
    return {"level": band, "passed": passed, "step": None, "tensor": None, "faults": 0, "nmse": nmse,
            "quantized": len(quantized),
            "line": f"{band}: {tail} (logits NMSE {nmse:.3g}; llama.cpp passes below {NMSE_PASS:g})"}
