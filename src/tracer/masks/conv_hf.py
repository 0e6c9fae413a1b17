"""transformers conventions: the user's 2-D attention_mask, the 4-D masks the backends get, legacy 4.x, BERT.

Checked against transformers 5.24 masking_utils (reference §2.3): the 2-D mask is cast to bool
(nonzero = keep), causality lives in cache-index space (query i sits at key slot i + past, so a
cache makes it bottom-right), a sliding window keeps W keys including the query itself, and a
4-D mask is passed through unchanged.
"""

from __future__ import annotations

import numpy as np

from tracer.errors import TracerError
from tracer.masks.broadcast import first_mismatch, right_align, torch_broadcast_error
from tracer.masks.canon import Builder
from tracer.masks.common import as_f64, dtype_of, framework_error, is_float, refuse_unused
from tracer.masks.conv_torch import build_sdpa
from tracer.masks.generated import bidirectional_window_keep, causal_keep, window_keep
from tracer.masks.literal import MaskSource, finfo_min
from tracer.masks.result import MaskResult
from tracer.masks.warnings import check_keep_as_additive, warn_causal_alignment, warn_left_padding, warn_window

HF = "transformers"


def hf_padding(b: Builder, src: MaskSource, opts) -> tuple[np.ndarray | None, int]:
    """The 2-D mask as transformers reads it -> keep [B, K] (right-padded for static-cache slots), and the past."""
    B, H, Q, K = b.shape
    if src.is_none:
        return None, (opts.past if opts.past is not None else K - Q)
    m = src.resolve(("int64",), opts.score_dtype)
    if m.ndim == 4:
        raise TracerError("transformers passes a 4-D mask through unchanged: use --convention hf-4d-sdpa or hf-4d-eager",
                          hint="hf-2d is the tokenizer's (batch, past+Q) mask")
    if m.ndim != 2:
        raise TracerError(f"transformers' attention_mask is 2-D (batch, past+Q); this one is {m.ndim}-D",
                          hint="one sequence: m[None]")
    if m.shape[0] != B:
        raise TracerError(f"the attention_mask has {m.shape[0]} rows but the scores have batch B={B}")
    values = as_f64(m)
    if (values < 0).any():
        b.warn("ML001", "the 2-D attention_mask holds negative values (an additive 0/-inf mask?): transformers casts it "
               "with .to(bool), so -inf and finfo.min count as KEEP and 0 as pad: the pattern comes out inverted")
    elif not np.isin(values, (0.0, 1.0)).all():
        b.note("values other than 0/1: transformers casts with .to(bool), so any nonzero value means keep")
    keep = m.astype(bool)
    b.step(".to(bool) (nonzero = keep, 1 = token, 0 = pad)", m.shape, m.shape, ("B", "K"))
    n = keep.shape[1]
    past = opts.past if opts.past is not None else n - Q
    if past < 0:
        raise TracerError(f"the attention_mask has {n} columns but there are Q={Q} queries: it must cover past + Q "
                          f"tokens", hint="--scores B,H,Q,K with Q <= the mask length")
    if past + Q > K:
        raise TracerError(f"past {past} + Q {Q} = {past + Q} tokens do not fit K={K} keys")
    if n < K:
        keep = np.concatenate([keep, np.zeros((B, K - n), dtype=bool)], axis=1)
        b.step("pad right with 0 (prepare_padding_mask: static-cache slots not yet filled)", (B, n), keep.shape, ("B", "K"))
    elif n > K:
        raise TracerError(f"the attention_mask has {n} columns but the scores have only K={K} keys")
    frac = keep[:, :n].mean()
    if frac < 0.5:
        b.warn("ML001", f"the attention_mask keeps only {frac:.0%} of the tokens: transformers reads 1 = token, 0 = pad; "
               f"an inverted mask (1 = pad) silently empties the unpadded rows")
    warn_left_padding(b, keep[:, :n])
    return keep, past


def build_hf_2d(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"past", "window", "bidirectional", "is_causal"},
                  "transformers takes padding (the mask), past (--past), a sliding window (--window W) or --bidirectional")
    b.extra["polarity"] = "keep"
    B, H, Q, K = b.shape
    impl = opts.hf_impl
    how = finfo_min(opts.score_dtype) if impl == "eager" else "-inf"
    keep2d, past = hf_padding(b, src, opts)
    # transformers ANDs every part as bool first and fills once (eager: where(mask, 0, min)), so no sums of fills.
    keep = np.ones(b.shape, dtype=bool)
    if keep2d is not None:
        pad4 = keep2d[:, None, None, :]
        b.step("view [B,1,1,KV] (padding_mask_function)", keep2d.shape, pad4.shape, ("B", "K"))
        keep &= pad4
    if opts.bidirectional:
        b.step("bidirectional (encoder): no causal part", (Q, K), (Q, K), ("Q", "K"))
    else:
        warn_causal_alignment(b, "bottom-right", past, Q, K, level="info")
        b.causal_offset = past
        keep &= causal_keep(Q, K, past)
        b.step(f"∧ causal in cache-index space (q = arange(Q) + {past}; keep kv <= q)", (Q, K), b.shape, ("Q", "K"))
    if opts.window is not None:
        w = opts.window
        if opts.bidirectional:
            keep &= bidirectional_window_keep(Q, K, w, past)
            b.step(f"∧ bidirectional sliding window (|q - kv| <= {w}: {2 * w + 1} keys)", (Q, K), b.shape, ("Q", "K"))
            b.note("transformers' bidirectional sliding overlay keeps |q - kv| <= W (2W+1 keys), unlike the causal one")
        else:
            keep &= window_keep(Q, K, w, past)
            b.step(f"∧ sliding window (kv > q - {w}: {w} keys incl. self)", (Q, K), b.shape, ("Q", "K"))
            warn_window(b, w)
    if opts.window_lr is not None:
        raise TracerError("transformers takes the window as sliding_window=W: use --window W")
    b.block(keep, how)
    if keep2d is not None:
        b.user_keep = np.broadcast_to(keep2d[:, None, None, :], b.shape).copy()
    describe_impl(b, impl, keep2d, past, Q, K)
    return b.finish()


def describe_impl(b: Builder, impl: str, keep2d, past: int, Q: int, K: int) -> None:
    """What each attention implementation receives, and what it gives a fully masked row."""
    no_padding = keep2d is None or bool(keep2d.all())
    if impl == "sdpa":
        b.hard_outcome = "zeros"
        b.step("sdpa_mask: bool [B,1,Q,KV], True = keep", b.shape, b.shape)
        window_forces = b.opts.window is not None and K >= b.opts.window
        if not b.opts.bidirectional and not window_forces and no_padding and (Q == 1 or Q == K):
            b.note("sdpa_mask returns None here and torch SDPA runs with is_causal=(Q > 1): the same pattern "
                   "(Q == K makes both corners equal; Q == 1 keeps every key)")
        b.outcome_notes.update({"transformers sdpa -> torch SDPA": "zeros"})
    elif impl == "eager":
        b.hard_outcome = "nan"
        b.step("eager_mask: where(mask, 0, finfo(dtype).min), added to the scores; softmax in float32",
               b.shape, b.shape)
        b.outcome_notes.update({"transformers eager (finfo.min)": "uniform"})
    else:
        b.hard_outcome = "zeros"
        b.step("flash_attention_mask: the 2-D bool mask (None without padding); unpadded to cu_seqlens, "
               "causal=True (bottom-right)", b.shape, b.shape)
        if b.opts.window is not None:
            w = b.opts.window
            b.note(f"FlashAttention gets window_size=({w - 1},{w - 1}) with causal=True: the same {w} keys")
        b.outcome_notes.update({"transformers flash_attention_2": "padded query rows are removed (zeros after re-padding)"})


def require_4d(b: Builder, m: np.ndarray) -> None:
    if m.ndim != 4:
        raise TracerError(f"--convention {b.convention} is a prepared 4-D mask (B,1,Q,KV); this one is {m.ndim}-D",
                          hint="the tokenizer's 2-D mask is --convention hf-2d")


def build_hf_4d_sdpa(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    if src.is_none:
        raise TracerError(f"--convention {name} needs --mask (B,1,Q,KV), True = keep")
    m = src.resolve(("bool",), opts.score_dtype)
    if m.ndim != 4:
        raise TracerError(f"--convention {name} is a prepared 4-D mask (B,1,Q,KV); this one is {m.ndim}-D",
                          hint="the tokenizer's 2-D mask is --convention hf-2d")
    result = build_sdpa(src, shape, opts, name, summary, "bool")
    result.notes.insert(0, "transformers passes a 4-D mask through unchanged: torch SDPA reads it as is")
    return result


def build_hf_4d_eager(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, set(), "a 4-D mask is passed through unchanged; build causality into it")
    if src.is_none:
        raise TracerError(f"--convention {name} needs --mask (B,1,Q,KV): 0 keep, finfo.min block")
    m = src.resolve((opts.score_dtype,), opts.score_dtype)
    require_4d(b, m)
    b.extra["polarity"] = "additive"
    b.hard_outcome = "nan"
    b.outcome_notes.update({"transformers eager, finfo.min rows": "uniform", "eager, -inf rows": "NaN"})
    B, H, Q, K = b.shape
    if m.shape[-1] > K:
        b.step(f"slice [..., :{K}] (eager slices the mask to the key length)", m.shape, m.shape[:-1] + (K,))
        m = m[..., :K]

    def reject(reason):
        return framework_error("transformers eager_attention_forward", "RuntimeError",
                               torch_broadcast_error(m.shape, b.shape), reason)

    m4 = right_align(b, m, reject, "transformers eager")
    if not is_float(m):
        b.note(f"a {dtype_of(m)} 4-D mask is ADDED as numbers by eager attention (True = +1)")
    check_keep_as_additive(b, m.astype(np.float64), "the 4-D mask (transformers 5 adds it; 4.x inverted 0/1 masks)")
    b.step("+ attention_mask (eager_attention_forward adds it to the scores)", m4.shape, m4.shape)
    b.add(as_f64(m4))
    return b.finish()


def build_hf_legacy_4d(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, set(), "the legacy 4-D path took the mask as is")
    if src.is_none:
        raise TracerError(f"--convention {name} needs --mask (B,1,Q,KV), 1 = keep")
    m = src.resolve(("int64",), opts.score_dtype)
    require_4d(b, m)
    b.extra["polarity"] = "keep"
    b.hard_outcome = "nan"
    b.outcome_notes.update({"transformers 4.x eager (finfo.min)": "uniform",
                            "4.x SDPA mem-efficient (_unmask_unattended)": "rows un-masked: the unmasked distribution"})
    values = as_f64(m)
    if not np.isin(values, (0.0, 1.0)).all():
        b.warn("ML001", "the legacy 4-D path computes (1 - m) and fills every nonzero result with finfo.min, so only "
               "exactly 1 keeps: an additive 0/-inf mask (or any value other than 1) comes out fully blocked")

    def reject(reason):
        return framework_error("transformers 4.x", "RuntimeError", torch_broadcast_error(m.shape, b.shape), reason)

    keep4 = right_align(b, values == 1.0, reject, "transformers 4.x")
    fill = finfo_min(opts.score_dtype)
    b.step("invert: (1 - m).masked_fill(!= 0, finfo.min)  (1 = keep)", keep4.shape, keep4.shape)
    b.block(keep4, fill, user=True)
    return b.finish()


def build_bert_extended(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"fill"}, "get_extended_attention_mask only expands the padding mask")
    if src.is_none:
        raise TracerError(f"--convention {name} needs --mask (B,K) or (B,Q,K), 1 = token")
    m = src.resolve(("int64",), opts.score_dtype)
    fill = opts.fill if opts.fill is not None else -10000.0
    b.extra["polarity"] = "keep"
    b.hard_outcome = "nan"
    if m.ndim == 2:
        ext = as_f64(m)[:, None, None, :]
        b.step("extended = m[:, None, None, :]", m.shape, ext.shape, ("B", "K"))
    elif m.ndim == 3:
        ext = as_f64(m)[:, None, :, :]
        b.step("extended = m[:, None, :, :]", m.shape, ext.shape, ("B", "Q", "K"))
    else:
        raise TracerError(f"get_extended_attention_mask takes (B,K) or (B,Q,K); this mask is {m.ndim}-D")
    if first_mismatch(ext.shape, b.shape) is not None:  # torch broadcasting: size-1 axes stretch
        raise framework_error("BERT get_extended_attention_mask", "RuntimeError", torch_broadcast_error(ext.shape, b.shape),
                              "the extended mask must broadcast onto (B,H,Q,K)")
    keep_frac = (ext != 0).mean()
    if keep_frac < 0.5:
        b.warn("ML001", f"the mask keeps only {keep_frac:.0%} of the tokens: BERT reads 1 = token, 0 = pad")
    if m.ndim == 2:
        warn_left_padding(b, m)
    plane = (1.0 - ext) * fill
    b.step(f"(1 - m) * {fill:g}, added to the scores", ext.shape, b.shape)
    b.add(plane, user=False, label="extended mask")
    b.user_keep = np.broadcast_to(ext != 0, b.shape).copy()
    b.outcome_notes.update({"BERT (-10000)": "the unmasked distribution (softmax shift invariance)",
                            "BERT (finfo.min)": "uniform"})
    return b.finish()
