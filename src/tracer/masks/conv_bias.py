"""Position biases and predicate masks: ALiBi, T5 relative buckets, torch flex_attention mask_mod.

These mostly add a bias rather than block; they share the offset rule of the rest of the lab
(query i sits at key slot i + offset; default bottom-right, K - Q, or --past).
"""

from __future__ import annotations

import numpy as np

from tracer.errors import TracerError
from tracer.masks.canon import Builder
from tracer.masks.common import as_f64, is_float, refuse_unused
from tracer.masks.generated import (
    alibi_bias, alibi_slopes, causal_keep, flex_predicate_keep, t5_bucket, t5_relative_positions,
)
from tracer.masks.literal import MaskSource, finfo_min
from tracer.masks.result import MaskResult, fmt_shape
from tracer.masks.warnings import warn_causal_alignment, warn_window

FLEX_WORDS = ("causal", "sliding", "prefix", "document")


def build_alibi(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"is_causal", "past", "heads", "causal_align"})
    b.extra["polarity"] = "additive"
    B, H, Q, K = b.shape
    total = opts.heads or H
    if total < H:
        raise TracerError(f"--heads {total} is smaller than the H={H} heads shown")
    if src.is_none:
        slopes = np.broadcast_to(alibi_slopes(total)[:H], (1, H))
        b.step(f"slopes 2^(-8(h+1)/{total}) (first {H} of {total} heads)", (total,), (1, H), ("H",))
    else:
        s = src.resolve(("float32",), opts.score_dtype)
        if not is_float(s) or s.ndim not in (1, 2):
            raise TracerError(f"ALiBi slopes are a float (H,) or (B,H) array (FlashAttention alibi_slopes); got "
                              f"{fmt_shape(s.shape)} {s.dtype}")
        slopes = as_f64(s).reshape(1, -1) if s.ndim == 1 else as_f64(s)
        if slopes.shape[1] != H or slopes.shape[0] not in (1, B):
            raise TracerError(f"ALiBi slopes {fmt_shape(s.shape)} do not match H={H} (and B={B})")
        b.step("slopes as given", s.shape, slopes.shape, ("H",) if s.ndim == 1 else ("B", "H"))
    align = opts.causal_align or "bottom-right"
    offset = 0 if align == "top-left" else (opts.past if opts.past is not None else K - Q)
    form = opts.alibi_form
    flat = slopes.reshape(-1)
    bias = alibi_bias(flat, Q, K, offset, form).reshape(slopes.shape[0], H, Q, K)
    formula = {"fa": f"-slope·|i + {offset} - j| (FlashAttention alibi_slopes)",
               "ggml": f"-slope·|p0 - p1| with p1 = i + {offset} (llama.cpp KQ mask × slope)",
               "bloom": "slope·j (BLOOM build_alibi_tensor: key position, shift-invariant trick)"}[form]
    b.step(f"+ ALiBi bias {formula}", slopes.shape, b.shape, ("B", "H")[2 - slopes.ndim:])
    b.add(bias, user=False, label="ALiBi bias")
    if form == "bloom" and not opts.is_causal:
        b.note("BLOOM's slope·j equals -slope·|i - j| only up to a per-row constant, and only for keys j <= i: "
               "without a causal mask the two forms give different weights (P12)")
    if opts.is_causal:
        warn_causal_alignment(b, align, offset, Q, K)
        b.causal_offset = offset
        b.block(causal_keep(Q, K, offset), "-inf")
        b.step(f"∧ causal ({align}, keep k <= q + {offset})", (Q, K), b.shape, ("Q", "K"))
    b.extra["alibi_slopes"] = slopes
    return b.finish()


def build_t5(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"is_causal", "past", "bidirectional"})
    b.extra["polarity"] = "additive"
    b.hard_outcome = "nan"
    B, H, Q, K = b.shape
    past = opts.past if opts.past is not None else K - Q
    rel = t5_relative_positions(Q, K, past)
    buckets = t5_bucket(rel, opts.bidirectional, opts.buckets, opts.max_distance)
    kind = "bidirectional (encoder)" if opts.bidirectional else "causal (decoder: future -> bucket 0)"
    b.step(f"relative = memory_pos - (arange(Q) + {past}) -> {opts.buckets} {kind} buckets, max_distance "
           f"{opts.max_distance}", (Q, K), (Q, K), ("Q", "K"))
    b.extra["buckets"] = buckets
    b.extra["relative_positions"] = rel
    if not src.is_none:
        table = src.resolve(("float32",), opts.score_dtype)
        if table.ndim != 2 or table.shape[0] != opts.buckets or table.shape[1] != H:
            raise TracerError(f"relative_attention_bias is nn.Embedding(num_buckets, n_heads): expected "
                              f"({opts.buckets},{H}), got {fmt_shape(table.shape)}")
        bias = np.transpose(as_f64(table)[buckets], (2, 0, 1))[None]  # [1, H, Q, K]
        b.step("relative_attention_bias(bucket).permute(2,0,1).unsqueeze(0)", table.shape, bias.shape, ("bucket", "H"))
        b.add(bias, user=False, label="position_bias")
    else:
        b.note("no bias table given (--mask TABLE.npy, shape (buckets, H)): showing the bucket ids only")
    if opts.is_causal:
        fill = finfo_min(opts.score_dtype)
        warn_causal_alignment(b, "bottom-right", past, Q, K, level="info")
        b.causal_offset = past
        b.step(f"position_bias + causal mask (finfo.min = {fill:.4g}, eager), added before the scores", (Q, K), b.shape,
               ("Q", "K"))
        b.block(causal_keep(Q, K, past), fill)
    b.note("T5 does not scale q·k by 1/sqrt(d) (self.scaling = 1.0): do not 'fix' it in a port (P13)")
    b.outcome_notes.update({"T5 eager (finfo.min)": "uniform"})
    return b.finish()


def build_flex(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"past"})
    b.extra["polarity"] = "keep"
    b.hard_outcome = "zeros"
    b.outcome_notes.update({"flex_attention": "zeros"})
    B, H, Q, K = b.shape
    if src.keyword is None:
        raise TracerError("--convention flex-mask-mod takes a predicate as --mask: causal, sliding(W), prefix(L), "
                          "document(0,0,1,1); join with &")
    offset = opts.past or 0
    keep, described = flex_predicate_keep(src.keyword, Q, K, offset)
    for d in described:
        b.step(f"mask_mod {d}", (Q, K), (Q, K), ("Q", "K"))
    b.step("create_block_mask over (B,H,Q,KV)", (Q, K), b.shape)
    if offset:
        b.note(f"--past {offset}: q_idx is offset by {offset} inside the predicates (flex itself passes raw 0..Q-1)")
    if any(w in src.keyword for w in ("causal", "sliding", "prefix")):
        warn_causal_alignment(b, "top-left" if not offset else "bottom-right", offset, Q, K)
        b.causal_offset = offset
    if "sliding(" in src.keyword:
        w = int(src.keyword.split("sliding(")[1].split(")")[0])
        warn_window(b, w)
    b.block(keep, "-inf")
    return b.finish()
