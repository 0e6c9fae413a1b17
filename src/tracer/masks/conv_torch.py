"""PyTorch conventions: scaled_dot_product_attention, MultiheadAttention, CausalBias, square subsequent mask.

Checked against torch 2.13 CPU (reference §1, §2.1, §2.2); the error texts are torch's own.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tracer.masks.broadcast import keep_view, looks_like_padding_rows, right_align, torch_broadcast_error
from tracer.masks.canon import Builder
from tracer.masks.common import (
    TORCH_DTYPE_NAMES, apply_causal, as_f64, dtype_of, float_pref, framework_error, is_bool, is_float,
    refuse_mask, refuse_unused,
)
from tracer.masks.generated import causal_keep
from tracer.masks.literal import MaskSource
from tracer.masks.result import MaskResult
from tracer.masks.warnings import (
    check_keep_as_additive, check_mha_3d_order, warn_causal_plus_mask, warn_left_padding,
)

SDPA = "torch.nn.functional.scaled_dot_product_attention"
MHA = "torch.nn.MultiheadAttention"


def torch_name(a: np.ndarray) -> str:
    return TORCH_DTYPE_NAMES.get(dtype_of(a), dtype_of(a))


# ---------- scaled_dot_product_attention ----------


def sdpa_dtype_error(m: np.ndarray, opts) -> Exception:
    return framework_error(
        SDPA, "RuntimeError",
        f"Expected attn_mask dtype to be bool or float or to match query dtype, but got attn_mask.dtype: "
        f"{torch_name(m)} and  query.dtype: {TORCH_DTYPE_NAMES[opts.score_dtype]} instead.",
        "SDPA takes a bool keep-mask or a float mask in the query's dtype",
        hint="cast with mask.bool() (True = keep) or mask.to(q.dtype) for an additive mask",
    )


def sdpa_accepts(m: np.ndarray, score_dtype: str) -> bool:
    """torch 2.13's SDPA check (checked live): a bool mask, a float32 mask, or a mask in the query's dtype."""
    return is_bool(m) or (is_float(m) and dtype_of(m) in ("float32", score_dtype))


def upcast_for_float32_mask(b: Builder, m: np.ndarray, api: str) -> None:
    """A float32 mask next to float16/bfloat16 queries: torch's CPU kernels (math and flash) add it and take the
    softmax in float32, so fills and outcomes follow float32 (a -70000 fill stays finite; checked with torch 2.13)."""
    if is_float(m) and dtype_of(m) == "float32" and b.opts.score_dtype in ("float16", "bfloat16"):
        b.note(f"{api} accepts a float32 mask with {b.opts.score_dtype} queries and computes the masked softmax in "
               "float32 on CPU (torch 2.13): fills and row outcomes below are float32's")
        b.opts = replace(b.opts, score_dtype="float32")


def build_sdpa(src: MaskSource, shape, opts, name: str, summary: str, flavour: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"is_causal", "causal_align", "past"}, "SDPA has no window, padding or position argument; "
                  "build them into attn_mask (or see a window with flex-mask-mod 'sliding(W)')")
    b.extra["polarity"] = "keep"
    b.hard_outcome = "zeros"
    b.outcome_notes.update({"SDPA math / CPU flash (torch >= 2.5, _safe_softmax)": "zeros",
                            "SDPA before torch 2.5": "NaN",
                            "finite fill rows": "uniform or the unmasked distribution"})
    B, H, Q, K = b.shape
    if not src.is_none:
        m = src.resolve(("bool",) if flavour == "bool" else float_pref(opts), opts.score_dtype)
        if not sdpa_accepts(m, opts.score_dtype):
            raise sdpa_dtype_error(m, opts)
        upcast_for_float32_mask(b, m, "SDPA")
        if m.ndim < 2:
            raise framework_error(SDPA, "IndexError",
                                  "Dimension out of range (expected to be in range of [-1, 0], but got -2)",
                                  "SDPA reads attn_mask.size(-2), so the mask must be at least 2-D",
                                  hint="a key padding mask (K,) is m[None, None, None, :] -> (1,1,1,K)")

        def reject(reason):
            return framework_error(SDPA, "RuntimeError", torch_broadcast_error(m.shape, b.shape), reason,
                                   hint="(B,K) padding: m[:, None, None, :]; (B,L,S): m[:, None]")

        m4 = right_align(b, m, reject, "torch SDPA")
        if is_bool(m):
            if flavour == "float":
                b.note("a bool mask is a keep-mask for SDPA (True = keep), whatever the convention name says")
            b.step("bool→additive (-inf where False; True = keep)", m4.shape, m4.shape)
            b.block(m4, "-inf", user=True)
        else:
            if flavour == "bool":
                b.note("a float mask is ADDED to the scores by SDPA (it is not a keep-mask)")
            check_keep_as_additive(b, m, "the float attn_mask")
            b.step("+ attn_mask (added to the scores)", m4.shape, m4.shape)
            b.add(as_f64(m4))
    if opts.is_causal:
        if not src.is_none:
            warn_causal_plus_mask(b, "shown as torch 2.13's CPU default dispatch does it (the flash kernel ANDs both); "
                                  "the MATH backend raises instead")
        label = None
        if (opts.causal_align or "top-left") == "bottom-right":
            label = "∧ causal_lower_right(Q,K) (torch.nn.attention.bias, bottom-right)"
        apply_causal(b, "top-left", label=label)
    elif opts.causal_align or opts.past:
        b.note("--causal-align/--past only matter with --is-causal")
    if src.is_none and not opts.is_causal:
        b.note("no attn_mask and is_causal=False: every key is kept")
    return b.finish()


# ---------- MultiheadAttention ----------


def mha_attn_mask(b: Builder, src: MaskSource, opts, flavour: str) -> str | None:
    """Apply MHA's attn_mask ((L,S) or (N*H,L,S)); returns its dtype kind for the kpm mismatch check."""
    B, H, Q, K = b.shape
    m = src.resolve(("bool",) if flavour == "bool" else float_pref(opts), opts.score_dtype)
    if not (is_bool(m) or is_float(m)):
        raise framework_error(MHA, "AssertionError", "only bool and floating types of attn_mask are supported",
                              "_canonical_mask accepts bool (True = block) or float (added)",
                              hint="uint8/int masks: use mask.bool() and remember True means BLOCK here")
    if is_float(m) and opts.need_weights and dtype_of(m) != opts.score_dtype:
        raise framework_error(MHA, "RuntimeError", f"Input dtypes must be the same, got: input {torch_name(m)}, "
                              f"batch1: {TORCH_DTYPE_NAMES[opts.score_dtype]}, batch2: {TORCH_DTYPE_NAMES[opts.score_dtype]}",
                              "with need_weights=True the float mask is the baddbmm input and must match the query dtype",
                              hint="mask.to(q.dtype)")
    if is_float(m) and not opts.need_weights:  # need_weights=False goes through SDPA and its dtype rule
        if not sdpa_accepts(m, opts.score_dtype):
            raise sdpa_dtype_error(m, opts)
        upcast_for_float32_mask(b, m, "MHA with need_weights=False (SDPA)")
    if m.ndim == 2:
        if m.shape != (Q, K):
            hint = None
            if m.shape == (B, K):
                hint = "this is (N,S): a key padding mask goes in key_padding_mask (--kpm or torch-mha-key-padding) [ML010]"
            raise framework_error(MHA, "RuntimeError", f"The shape of the 2D attn_mask is torch.Size([{m.shape[0]}, "
                                  f"{m.shape[1]}]), but should be ({Q}, {K}).", "a 2-D attn_mask must be exactly (L,S)",
                                  hint=hint)
        keep_rows = ~m if is_bool(m) else np.isfinite(as_f64(m)) & (as_f64(m) > opts.soft_threshold)
        if B == Q and B > 1 and looks_like_padding_rows(keep_rows):
            b.warn("ML010", f"the 2-D attn_mask {m.shape} has rows like key padding (N,S) and is accepted only because "
                   f"N == L == {B}: attn_mask is per QUERY; padding goes in key_padding_mask")
        m4 = m[None, None]
        b.step("view (L,S) -> (1,1,L,S)", m.shape, m4.shape, ("Q", "K"))
        if (B, H) != (1, 1):
            b.step("broadcast over N and heads", m4.shape, b.shape)
    elif m.ndim == 3:
        if m.shape != (B * H, Q, K):
            hint = None
            if m.shape == (B, Q, K) and H > 1:
                hint = f"(N,L,S) is rejected when num_heads > 1: use m.repeat_interleave({H}, dim=0) -> ({B * H},{Q},{K})"
            raise framework_error(MHA, "RuntimeError", f"The shape of the 3D attn_mask is torch.Size([{', '.join(map(str, m.shape))}"
                                  f"]), but should be ({B * H}, {Q}, {K}).", "a 3-D attn_mask must be (N*num_heads, L, S)",
                                  hint=hint)
        check_mha_3d_order(b, m, B, H)
        m4 = m.reshape(B, H, Q, K)
        b.step("view(N,H,L,S)", m.shape, m4.shape, ("B*H", "Q", "K"), note="slice i is (b, h) with i = b*H + h")
    else:
        raise framework_error(MHA, "AssertionError", f"For batched (3-D) `query`, expected `attn_mask` to be `None`, 2-D or "
                              f"3-D but found {m.ndim}-D tensor instead", "MHA takes (L,S) or (N*num_heads,L,S)",
                              hint="a (B,1,Q,K) mask: m.expand(B,H,Q,K).reshape(B*H,Q,K)")
    full = np.broadcast_to(m4, b.shape)
    if is_bool(m):
        if flavour == "float":
            b.note("a bool attn_mask is read with True = BLOCK by MHA, whatever the convention name says")
        b.step("invert (True = block → keep) and bool→additive(-inf) (_canonical_mask)", full.shape, full.shape)
        b.block(~full, "-inf", user=True)
        return "bool"
    if flavour == "bool":
        b.note("a float attn_mask is ADDED to the scores by MHA")
    check_keep_as_additive(b, m, "the float attn_mask")
    b.step("+ attn_mask (added to the scores)", full.shape, full.shape)
    b.add(as_f64(full))
    return "float"


def mha_key_padding(b: Builder, src: MaskSource, opts, attn_kind: str | None) -> None:
    """key_padding_mask: (N,S) (or (S) for an unbatched query), True = PAD; viewed (N,1,1,S) and added."""
    B, H, Q, K = b.shape
    m = src.resolve(("bool",), opts.score_dtype)
    if not (is_bool(m) or is_float(m)):
        raise framework_error(MHA, "AssertionError", "only bool and floating types of key_padding_mask are supported",
                              "_canonical_mask accepts bool (True = pad) or float (added)",
                              hint="a tokenizer's attention_mask (1 = token) is key_padding_mask = (attention_mask == 0)")
    if m.ndim == 1 and B == 1:
        m = m[None]
        b.step("unbatched query: key_padding_mask (S) -> (1,S)", m.shape[1:], m.shape, ("K",))
    elif m.ndim != 2:
        raise framework_error(MHA, "AssertionError", f"For batched (3-D) `query`, expected `key_padding_mask` to be `None` "
                              f"or 2-D but found {m.ndim}-D tensor instead", "key_padding_mask is (N,S)")
    for axis, want in ((0, B), (1, K)):
        if m.shape[axis] != want:
            hint = None
            if m.shape == (Q, K):
                hint = "this is (L,S): a per-query mask goes in attn_mask (torch-mha-bool) [ML010]"
            raise framework_error(MHA, "AssertionError", f"Expected key_padded_mask.shape[{axis}] to be {want}, but got "
                                  f"{m.shape[axis]}", "key_padding_mask must be (N,S)", hint=hint)
    if B == Q and Q > 1 and np.array_equal(keep_view(m) if not is_bool(m) else m, np.triu(np.ones((Q, K), bool), 1)[:, :K]):
        b.warn("ML010", "the key_padding_mask is triangular like a causal attn_mask; it is accepted only because N == L: "
               "key_padding_mask blocks keys per SAMPLE, not per query")
    if attn_kind is not None and attn_kind != ("bool" if is_bool(m) else "float"):
        b.warn("ML010", "Support for mismatched key_padding_mask and attn_mask is deprecated. Use same type for both "
               "instead. (torch's UserWarning; the bool one becomes -inf and the two are added)")
    m4 = m[:, None, None, :]
    b.step("view(N,1,1,S)", m.shape, m4.shape, ("B", "K"))
    b.step("expand(N,H,L,S) (reshape(N*H,1,S) internally)", m4.shape, b.shape)
    full = np.broadcast_to(m4, b.shape)
    if is_bool(m):
        keep2d = ~m
        b.step("invert (True = pad → keep) and bool→additive(-inf)", b.shape, b.shape)
        b.block(~full, "-inf", user=True)  # keep where not padded
    else:
        values = as_f64(m)
        odd = np.unique(values[~(np.isneginf(values) | (values == 0))])
        odd = odd[odd > opts.soft_threshold]  # finite fills like finfo.min still block
        if odd.size:
            b.warn("ML010", f"the float key_padding_mask holds {', '.join(f'{v:g}' for v in odd[:4])}: it is ADDED to "
                   f"the scores (only 0 and -inf mean keep/pad); 0/1 floats block nothing (pytorch#136816)")
        keep2d = np.isfinite(values) & (values > opts.soft_threshold)
        b.step("+ key_padding_mask (added)", b.shape, b.shape)
        b.add(as_f64(full))
    if keep2d.mean() < 0.5:
        b.warn("ML001", f"the key_padding_mask keeps only {keep2d.mean():.0%} of the keys: in MHA True = PAD (block). "
               f"Did you pass a tokenizer attention_mask (1 = token)? Use key_padding_mask = (attention_mask == 0)")
    warn_left_padding(b, keep2d)


def build_mha(src: MaskSource, shape, opts, name: str, summary: str, flavour: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"is_causal", "kpm"}, "MultiheadAttention has no window or offset; build them into attn_mask")
    b.extra["polarity"] = "block"
    b.hard_outcome = "nan" if opts.need_weights else "zeros"
    b.outcome_notes.update({"MHA need_weights=True (softmax of baddbmm)": "NaN (weights NaN too)",
                            "MHA need_weights=False (via SDPA)": "zeros (then out_proj bias)",
                            "MHA eval + no_grad fast path": "NaN"})
    attn_kind = None
    if not src.is_none:
        attn_kind = mha_attn_mask(b, src, opts, flavour)
    if opts.kpm is not None:
        from tracer.masks.literal import load_mask

        kpm = opts.kpm if isinstance(opts.kpm, MaskSource) else load_mask(opts.kpm, opts.score_dtype)
        mha_key_padding(b, kpm, opts, attn_kind)
    if opts.is_causal:
        if src.is_none:
            raise framework_error(MHA, "RuntimeError", "Need attn_mask if specifying the is_causal hint. You may use the "
                                  "Transformer module method `generate_square_subsequent_mask` to create this mask.",
                                  "is_causal is only a hint about attn_mask")
        if opts.need_weights or opts.kpm is not None:
            warn_causal_plus_mask(b, "MHA ignores the hint here (need_weights=True or a key_padding_mask), so the "
                                  "pattern is the mask's; with need_weights=False and no key_padding_mask MHA would DROP "
                                  "attn_mask and use SDPA is_causal instead")
        else:
            warn_causal_plus_mask(b, "with need_weights=False and no key_padding_mask MHA DROPS attn_mask and calls SDPA "
                                  "with is_causal=True (top-left): a wrong hint changes the output silently")
            b.term[:] = 0.0
            b.user_keep = None
            b.step("is_causal hint: attn_mask dropped; SDPA is_causal=True", b.shape, b.shape)
            apply_causal(b, "top-left")
    if src.is_none and opts.kpm is None:
        b.note("no attn_mask and no key_padding_mask: every key is kept")
    return b.finish()


def build_mha_kpm(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, set(), "a key_padding_mask only blocks keys per sample")
    b.extra["polarity"] = "block"
    b.hard_outcome = "nan" if opts.need_weights else "zeros"
    b.outcome_notes.update({"MHA need_weights=True": "NaN", "MHA need_weights=False (via SDPA)": "zeros"})
    if src.is_none:
        from tracer.errors import TracerError

        raise TracerError("--convention torch-mha-key-padding needs --mask (N,S), True = pad")
    mha_key_padding(b, src, opts, None)
    return b.finish()


# ---------- generated torch masks ----------


def build_causal_bias(src: MaskSource, shape, opts, name: str, summary: str, align: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_mask(b, src, "CausalBias is generated from (Q, K)")
    refuse_unused(b, {"is_causal"})
    b.hard_outcome = "zeros"
    B, H, Q, K = b.shape
    fn = "causal_lower_right" if align == "bottom-right" else "causal_upper_left"
    offset = K - Q if align == "bottom-right" else 0
    from tracer.masks.warnings import warn_causal_alignment

    warn_causal_alignment(b, align, offset, Q, K)
    b.causal_offset = offset
    b.block(causal_keep(Q, K, offset), "-inf")
    b.step(f"torch.nn.attention.bias.{fn}({Q},{K}): keep k <= q + {offset}", (Q, K), b.shape, ("Q", "K"))
    if align == "bottom-right" and Q > K:
        b.note("torch warns 'Lower right causal bias will produce NaNs in the output when seq_len_q > seq_len_kv!'; "
               "torch 2.13 CPU returns zeros for those rows")
    b.outcome_notes["SDPA (torch 2.13 CPU)"] = "zeros"
    return b.finish()


def build_square_subsequent(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_mask(b, src, "generate_square_subsequent_mask(sz) builds it")
    refuse_unused(b, {"is_causal"})
    B, H, Q, K = b.shape
    if Q != K:
        raise framework_error(MHA, "RuntimeError", f"The shape of the 2D attn_mask is torch.Size([{Q}, {Q}]), but should be "
                              f"({Q}, {K}).", "generate_square_subsequent_mask(sz) is square (sz,sz); with a cache "
                              "(Q != K) build the mask yourself (bottom-right: torch-causal-lower-right)")
    plane = np.where(causal_keep(Q, Q, 0), 0.0, -np.inf)
    b.step(f"generate_square_subsequent_mask({Q}): triu(full(-inf), 1), 0 keep / -inf block", (Q, Q), (Q, Q), ("Q", "K"))
    b.step("view (L,S) -> (1,1,L,S), broadcast", (Q, Q), b.shape, ("Q", "K"))
    b.causal_offset = 0
    b.add(plane, user=False, label="square subsequent mask")
    b.hard_outcome = "nan"
    b.outcome_notes.update({"as MHA attn_mask, need_weights=True": "NaN", "as SDPA attn_mask": "zeros"})
    return b.finish()
