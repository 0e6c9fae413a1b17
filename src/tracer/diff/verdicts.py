"""The acceptance rules porting teams already use, as verdicts on the same two traces `tracer diff` compares.

    nmse    llama.cpp (examples/model-conversion, check-nmse.py): NMSE = mean((mine - ref)^2) / var(ref) on the
            logits; < 1e-6 identical, < 1e-4 excellent, < 1e-3 very good, < 1e-2 good (passes), < 0.1
            acceptable, < 1 poor, else very poor
    layers  mlx-lm-tests: per block max|Δ| / max|ref| of the stream leaving the block; ok < 1 %, warn < 10 %,
            DIVERGED otherwise; fails at the first DIVERGED block
    topk    vLLM (check_logprobs_close): walk the positions (the generated tokens, in a generation trace);
            at the first one where the two sides pick different tokens, each pick must be in the other's
            top-k; later positions are not compared (they condition on different text)
    kl      MaxText (forward_pass_logit_checker): KL(ref || mine) of the next-token distributions at every
            real position; fails when the largest exceeds max_kl (default 0.015, MaxText's scripts' bound)
    steps   tracer's own rule: every compared step within atol + rtol * |ref|

Each verdict reads only `logits` (or `probs`) and `blocks.{i}.resid_post`, over the reference's real
positions, and says what it compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from tracer.diff import metrics as M
from tracer.diff.compare import DiffReport, real_positions
from tracer.errors import TracerError
from tracer.steps import decode_step
from tracer.trace import Trace

NAMES = ("nmse", "layers", "topk", "kl", "steps")
DEFAULT_MAX_KL = 0.015
NMSE_BANDS = ((0.0, "perfect"), (1e-6, "essentially identical"), (1e-4, "excellent"), (1e-3, "very good"),
              (1e-2, "good"), (0.1, "acceptable"), (1.0, "poor"))
NMSE_PASS = 1e-2
LAYER_BANDS = ((0.01, "ok"), (0.1, "warn"))


@dataclass(frozen=True)
class Verdict:
    name: str
    passed: bool
    level: str  # the rule's own word: a band, ok / warn / DIVERGED, pass / fail
    summary: str  # one line: the number and what was compared
    data: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "level": self.level, "summary": self.summary, **self.data}


def nmse_band(nmse: float) -> str:
    if nmse == 0:
        return NMSE_BANDS[0][1]
    for bound, word in NMSE_BANDS[1:]:
        if nmse < bound:
            return word
    return "very poor"


def llamacpp_nmse(ref: np.ndarray, mine: np.ndarray) -> float:
    """check-nmse.py's measure: the mean squared error over the reference's variance (not its mean square)."""
    r, m = M.as_f64(ref), M.as_f64(mine)
    mse, var = float(np.mean((m - r) ** 2)), float(np.var(r))
    if var == 0:
        return float("inf") if mse > 0 else 0.0
    return mse / var


def _rows(trace: Trace, real: np.ndarray | None, name: str) -> np.ndarray:
    """[n, last] rows of a [batch, pos, ...] step at the reference's real positions."""
    a = np.asarray(trace[name])
    if real is not None and a.shape[:2] == real.shape:
        return a[real]
    return a.reshape(-1, a.shape[-1])


def _distribution_step(ref: Trace, mine: Trace) -> str:
    for name in ("logits", "probs"):
        if _kept(ref, name) and _kept(mine, name):
            return name
    raise TracerError("this verdict needs logits (or probs) kept whole on both sides",
                      hint="save the traces with the logits kept (tracer run keeps them by default)")


def _kept(trace: Trace, name: str) -> bool:
    return name in trace and trace.step(name).array is not None


def _log_probs(name: str, rows: np.ndarray) -> np.ndarray:
    return M.log_softmax(rows) if name == "logits" else M.log_probs_from_probs(rows)


def nmse_verdict(ref: Trace, mine: Trace) -> Verdict:
    name = _distribution_step(ref, mine)
    real = real_positions(ref)
    nmse = llamacpp_nmse(_rows(ref, real, name), _rows(mine, real, name))
    band = nmse_band(nmse)
    db = f", {10 * np.log10(nmse):.1f} dB" if 0 < nmse < float("inf") else ""
    return Verdict("nmse", nmse < NMSE_PASS, band,
                   f"NMSE {nmse:.3g}{db} on {name} (llama.cpp passes below {NMSE_PASS:g})",
                   {"nmse": nmse, "step": name})


def layers_verdict(ref: Trace, mine: Trace) -> Verdict:
    real = real_positions(ref)
    rows = []
    for block, name in _block_outputs(ref):
        if not (_kept(mine, name) and _kept(ref, name)):
            continue
        r, m = _rows(ref, real, name), _rows(mine, real, name)
        scale = float(np.max(np.abs(M.as_f64(r))))
        ratio = M.max_abs(r, m) / scale if scale > 0 else (0.0 if M.max_abs(r, m) == 0 else float("inf"))
        level = next((word for bound, word in LAYER_BANDS if ratio < bound), "DIVERGED")
        rows.append({"block": block, "step": name, "ratio": ratio, "level": level})
    if not rows:
        raise TracerError("the layers verdict needs blocks.{i}.resid_post kept whole on both sides")
    first = next((r for r in rows if r["level"] == "DIVERGED"), None)
    worst = max(rows, key=lambda r: r["ratio"])
    if first is not None:
        summary = f"block {first['block']} DIVERGED: max|Δ| / max|ref| = {_percent(first['ratio'])} (DIVERGED from 10 %)"
    else:
        summary = f"{len(rows)} blocks, worst block {worst['block']} at {_percent(worst['ratio'])} (ok < 1 %, warn < 10 %)"
    level = "DIVERGED" if first is not None else ("warn" if worst["level"] == "warn" else "ok")
    return Verdict("layers", first is None, level, summary,
                   {"blocks": rows, "first_diverged": None if first is None else first["block"]})


def _block_outputs(trace: Trace) -> list[tuple[int, str]]:
    """(block, step) of each block's outgoing stream, of the stack that makes the output, in order."""
    prefix = "decoder." if any(n.startswith("decoder.blocks.") for n in trace.names()) else ""
    pattern = re.compile("^" + re.escape(prefix) + r"blocks\.(\d+)\.resid_post$")
    found = [(int(m.group(1)), n) for n in trace.names() if (m := pattern.match(n))]
    return sorted(found)


def next_token_rows(trace: Trace, name: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per batch row: ([n, vocab] next-token scores in order, the real positions they stand at). A generation
    trace gives the prefill's last real position then one row per decoding step; a plain trace every real
    position of `name` (teacher-forced next tokens)."""
    decode = sorted((t, n) for n in trace.names() if (t := decode_step(n)[0]) is not None and decode_step(n)[1] == name)
    real = real_positions(trace)
    a = np.asarray(trace[name])  # [batch, pos, vocab]
    rows = []
    for b in range(a.shape[0]):
        keep = real[b] if real is not None and real.shape == a.shape[:2] else np.ones(a.shape[1], bool)
        if not decode:
            rows.append(a[b][keep])
            continue
        last = np.flatnonzero(keep)[-1]
        rows.append(np.stack([a[b, last]] + [np.asarray(trace[n])[b, -1] for _, n in decode]))
    return rows


def topk_verdict(ref: Trace, mine: Trace, k: int) -> Verdict:
    name = _distribution_step(ref, mine)
    checked, first = 0, None
    for row, (r, m) in enumerate(zip(next_token_rows(ref, name), next_token_rows(mine, name))):
        n = min(len(r), len(m))
        picks_r, picks_m = np.argmax(r[:n], axis=-1), np.argmax(m[:n], axis=-1)
        differ = np.flatnonzero(picks_r != picks_m)
        checked += n if not len(differ) else int(differ[0]) + 1
        if len(differ) and first is None:
            i = int(differ[0])
            top_r, top_m = set(M.top_k(r[i], k).tolist()), set(M.top_k(m[i], k).tolist())
            first = {"row": row, "index": i, "ref": int(picks_r[i]), "mine": int(picks_m[i]),
                     "mine_in_ref_topk": int(picks_m[i]) in top_r, "ref_in_mine_topk": int(picks_r[i]) in top_m}
    if first is None:
        return Verdict("topk", True, "pass", f"the same token at all {checked} compared positions", {"k": k, "first_difference": None})
    passed = first["mine_in_ref_topk"] and first["ref_in_mine_topk"]
    summary = (f"first different pick at row {first['row']}, position {first['index']}: ref {first['ref']}, mine "
               f"{first['mine']}; " + ("each within the other's top-" if passed else "not within each other's top-") + str(k))
    return Verdict("topk", passed, "pass" if passed else "fail", summary, {"k": k, "first_difference": first})


def kl_verdict(ref: Trace, mine: Trace, max_kl: float) -> Verdict:
    name = _distribution_step(ref, mine)
    real = real_positions(ref)
    kl = M.kl_divergence(_log_probs(name, _rows(ref, real, name)), _log_probs(name, _rows(mine, real, name)))
    worst, mean = float(np.max(kl)), float(np.mean(kl))
    passed = worst <= max_kl
    return Verdict("kl", passed, "pass" if passed else "fail",
                   f"max KL(ref || mine) {worst:.3g} nats (mean {mean:.3g}) over {kl.size} positions; bound {max_kl:g}",
                   {"max_kl": worst, "mean_kl": mean, "bound": max_kl, "positions": int(kl.size)})


def steps_verdict(report: DiffReport) -> Verdict:
    first = report.first_divergence
    if first is None:
        return Verdict("steps", True, "pass", f"all {len(report.compared)} compared steps within atol {report.atol:g}, "
                                               f"rtol {report.rtol:g}")
    return Verdict("steps", False, "fail", f"first divergence at {first.name} ({first.reason})", {"first": first.name})


def verdicts(names: list[str], ref: Trace, mine: Trace, report: DiffReport, k: int = 5,
             max_kl: float = DEFAULT_MAX_KL) -> list[Verdict]:
    """The named verdicts, in the order given (each name once)."""
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise TracerError(f"unknown verdict {unknown[0]!r}", hint="choose from " + ", ".join(NAMES))
    if max_kl < 0:
        raise TracerError(f"the KL bound must be >= 0, got {max_kl:g}")
    rules = {"nmse": lambda: nmse_verdict(ref, mine), "layers": lambda: layers_verdict(ref, mine),
             "topk": lambda: topk_verdict(ref, mine, k), "kl": lambda: kl_verdict(ref, mine, max_kl),
             "steps": lambda: steps_verdict(report)}
    return [rules[n]() for n in dict.fromkeys(names)]


def dtype_flags(ref: Trace, mine: Trace) -> list[dict]:
    """Steps whose dtype differs from the reference's; a float64 step in a float32 port is said apart
    (NumPy 2 promotes a whole computation to float64 on one float64 scalar: right numbers, many times slower)."""
    ref_steps = {s.name: s for s in ref.steps}
    flags = []
    for s in mine.steps:
        r = ref_steps.get(s.name)
        if r is None or r.dtype == s.dtype:
            continue
        promoted = s.dtype == "float64" and r.dtype == "float32"
        flags.append({"name": s.name, "ref": r.dtype, "mine": s.dtype, "promoted": promoted})
    return flags


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.3g} %"
