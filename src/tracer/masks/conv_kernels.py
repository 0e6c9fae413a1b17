"""Kernel-level conventions: xFormers attn_bias, FlashAttention flags, MLX fast SDPA, llama.cpp's KQ mask.

Reference §1, §2.6-§2.8. FlashAttention takes no mask tensor at all (padding is unpadding);
xFormers wants an exact-shape additive bias; MLX's "causal" is bottom-right; ggml's mask is
built from positions, given in reversed ne order, and broadcast over heads by modulo.
"""

from __future__ import annotations

import numpy as np

from tracer.errors import TracerError
from tracer.masks.broadcast import expand_heads_by_modulo, right_align
from tracer.masks.canon import Builder
from tracer.masks.common import (
    apply_causal, apply_window, as_f64, dtype_of, float_pref, framework_error, is_bool, is_float, refuse_mask,
    refuse_unused,
)
from tracer.masks.generated import alibi_bias, alibi_slopes, causal_keep, positions_keep, window_keep
from tracer.masks.literal import MaskSource
from tracer.masks.result import MaskResult, fmt_shape
from tracer.masks.warnings import check_keep_as_additive, warn_causal_alignment, warn_window

XF = "xformers.ops.memory_efficient_attention"


def build_xformers(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"is_causal", "causal_align", "window", "window_lr"})
    b.extra["polarity"] = "additive"
    b.hard_outcome = "unspecified"
    b.outcome_notes.update({"xFormers tensor bias": "not documented (unspecified)",
                            "BlockDiagonalCausalLocalAttentionMask": "raises 'No keys are attended'"})
    B, H, Q, K = b.shape
    objects = []
    if not src.is_none:
        m = src.resolve(float_pref(opts), opts.score_dtype)
        if not is_float(m):
            raise framework_error(XF, "ValueError", f"attn_bias must be a floating tensor, got {dtype_of(m)}",
                                  "a tensor attn_bias is ADDED to the scores (0 keep, -inf block)",
                                  hint="torch.where(keep, 0.0, float('-inf'))")
        if tuple(m.shape) != b.shape:
            raise framework_error(XF, "ValueError", f"Invalid shape for attention bias: torch.Size([{', '.join(map(str, m.shape))}"
                                  f"]) (expected ({B}, {H}, {Q}, {K}))",
                                  "a tensor bias must be exactly (B, H, Mq, Mk): no implicit broadcasting",
                                  hint=f"bias.expand({B}, {H}, {Q}, {K})")
        check_keep_as_additive(b, m, "the attn_bias tensor")
        b.step("+ attn_bias (exact shape, no broadcast)", m.shape, m.shape, ("B", "H", "Q", "K"))
        b.add(as_f64(m))
    align = opts.causal_align or "top-left"
    if opts.window is not None:
        if opts.causal_align == "top-left":
            raise TracerError("xformers' local causal mask is bottom-right (LowerTriangularFromBottomRightLocalAttentionMask)")
        offset = apply_causal(b, "bottom-right", label="∧ causal from bottom-right")
        b.block(window_keep(Q, K, opts.window, offset), "-inf")
        objects.append(f"LowerTriangularFromBottomRightLocalAttentionMask({opts.window})")
        b.step(f"∧ make_local_attention({opts.window}): keep k > q + {offset} - {opts.window}", (Q, K), b.shape, ("Q", "K"))
        warn_window(b, opts.window)
    elif opts.is_causal:
        objects.append("LowerTriangularMask" if align == "top-left" else "LowerTriangularFromBottomRightMask")
        apply_causal(b, "top-left", label=f"∧ {objects[-1]} ({align})")
    if opts.window_lr is not None:
        left, right = opts.window_lr
        offset = K - Q
        objects.append(f"LocalAttentionFromBottomRightMask({left}, {right})")
        apply_window(b, offset, label=" (bottom-right)")
    if objects and not src.is_none:
        b.note("a causal object plus a tensor: LowerTriangularMask().add_bias(tensor) (LowerTriangularMaskWithTensorBias)")
    if objects:
        b.extra["attn_bias_objects"] = objects
    if src.is_none and not objects:
        b.note("attn_bias=None: every key is kept")
    return b.finish()


def build_flash(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_mask(b, src, "flash_attn_func has causal, window_size and alibi_slopes; padding is removed by unpadding "
                "(cu_seqlens) - see it with --convention hf-2d --hf-impl flash")
    refuse_unused(b, {"is_causal", "window", "window_lr", "alibi", "heads"})
    b.hard_outcome = "zeros"
    b.outcome_notes.update({"FlashAttention": "zeros ('If the row of the mask is all zero, the output will be zero')"})
    B, H, Q, K = b.shape
    shift = K - Q
    if opts.is_causal:
        top_left = opts.fa_version == "2.0"
        offset = 0 if top_left else shift
        warn_causal_alignment(b, "top-left" if top_left else "bottom-right", offset, Q, K)
        b.causal_offset = offset
        b.block(causal_keep(Q, K, offset), "-inf")
        b.step(f"causal=True, flash-attn {opts.fa_version}{'' if top_left else '+'}: keep k <= q + {offset} "
               f"({'top-left' if top_left else 'bottom-right'})", (Q, K), b.shape, ("Q", "K"))
    if opts.window is not None:
        w = opts.window
        b.block(window_keep(Q, K, w, shift), "-inf")
        b.block(causal_keep(Q, K, shift), "-inf")
        b.step(f"window_size=({w - 1},0): keep q+{shift}-{w - 1} <= k <= q+{shift} (bottom-right since 2.3)",
               (Q, K), b.shape, ("Q", "K"))
        warn_window(b, w)
    elif opts.window_lr is not None:
        left, right = opts.window_lr
        apply_window(b, shift, label=f" window_size=({left},{right}), bottom-right")
    if opts.alibi:
        n = opts.heads or H
        slopes = alibi_slopes(n)[:H]
        b.add(alibi_bias(slopes, Q, K, shift, "fa")[None], user=False, label="ALiBi bias")
        b.step(f"+ alibi_slopes ({H},): -slope·|i + {shift} - j|", (H,), b.shape, ("H",))
        b.extra["alibi_slopes"] = slopes
    if not (opts.is_causal or opts.window or opts.window_lr or opts.alibi):
        b.note("no causal flag and no window: every key is kept")
    return b.finish()


def build_mlx(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"is_causal", "window", "causal_align"})
    b.hard_outcome = "zeros"
    b.outcome_notes.update({"MLX fused kernels (since PR #2608)": "no NaN (zeros)", "MLX fallback (finfo.min where)": "uniform",
                            "MLX before PR #2608": "NaN"})
    B, H, Q, K = b.shape
    causal = opts.is_causal or (src.keyword or "").strip() == "causal"
    if opts.is_causal and src.array is not None or (opts.is_causal and src.values is not None):
        raise TracerError("MLX takes mask='causal' or a mask array, not both: AND the causal part into the array")
    if src.keyword and src.keyword.strip() != "causal":
        raise TracerError(f"mlx mask keyword {src.keyword!r}: only 'causal'")
    if not src.is_none and not src.keyword:
        m = src.resolve(("bool",), opts.score_dtype)
        if m.ndim > 4:
            raise TracerError(f"mx.fast.scaled_dot_product_attention takes a mask of at most 4 dims, got {m.ndim}")

        def reject(reason):
            return framework_error("mx.fast.scaled_dot_product_attention", "ValueError",
                                   f"mask {fmt_shape(m.shape)} is not broadcast-compatible with {fmt_shape(b.shape)}", reason)

        m4 = right_align(b, m, reject, "MLX")
        if is_bool(m):
            b.extra["polarity"] = "keep"
            b.step("bool mask, True = keep (fused: where(mask, 0, -inf); fallback: where(mask, s, finfo.min))",
                   m4.shape, m4.shape)
            b.block(m4, "-inf", user=True)
        else:
            if not is_float(m):
                b.note(f"a {dtype_of(m)} mask is not bool, so MLX treats it as additive (promoted to the query dtype)")
            check_keep_as_additive(b, m, "the additive mask")
            b.step("+ additive mask", m4.shape, m4.shape)
            b.add(as_f64(m4))
    if causal:
        if opts.causal_align == "top-left":
            raise TracerError("MLX's mask='causal' is lower-right (bottom-right); there is no top-left option")
        apply_causal(b, "bottom-right", label="mask='causal': q_idx = arange(K-Q, K) >= k (bottom-right)")
    if opts.window is not None:
        if not causal:
            raise TracerError("an mlx_lm window comes from create_causal_mask(N, offset, window_size): add --is-causal")
        b.block(window_keep(Q, K, opts.window, K - Q), "-inf")
        b.step(f"∧ mlx_lm create_causal_mask(window_size={opts.window}): linds < rinds + {opts.window}",
               (Q, K), b.shape, ("Q", "K"))
        warn_window(b, opts.window)
    return b.finish()


def build_ggml(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"positions", "window", "bidirectional", "alibi", "heads", "ggml_ne_order"})
    b.hard_outcome = "nan"
    b.outcome_notes.update({"llama.cpp CPU soft_max (max = -inf)": "NaN (debug builds assert sum > 0)"})
    B, H, Q, K = b.shape
    slopes = alibi_slopes(opts.heads or H)[:H] if opts.alibi else None
    if not src.is_none:
        if opts.positions is not None:
            raise TracerError("give the KQ mask (--mask) or --positions to build it, not both")
        m = src.resolve(("float32",), opts.score_dtype)
        if dtype_of(m) not in ("float32", "float16"):
            raise framework_error("ggml_soft_max_ext", "GGML_ASSERT", "mask->type == GGML_TYPE_F16 || mask->type == "
                                  f"GGML_TYPE_F32 (got {dtype_of(m)})", "the KQ mask is F32 (F16 with flash attention)")
        if opts.ggml_ne_order:
            flipped = np.transpose(m, tuple(range(m.ndim))[::-1])
            b.step("ggml ne order [n_kv, n_tok, 1, n_stream] -> NumPy (n_stream, 1, n_tok, n_kv)", m.shape, flipped.shape)
            m = flipped
        if m.ndim > 4 or m.ndim < 2:
            raise TracerError(f"the KQ mask needs 2 to 4 dims, got {m.ndim}")
        m4 = m.reshape((1,) * (4 - m.ndim) + m.shape)
        if m.ndim < 4:
            b.step("add leading axes", m.shape, m4.shape, ("B", "H", "Q", "K")[4 - m.ndim:])
        if m4.shape[-1] != K:
            raise framework_error("ggml_soft_max_ext", "GGML_ASSERT", f"mask->ne[0] == a->ne[0] ({m4.shape[-1]} vs {K})",
                                  "the mask has one column per KV cell", hint="--ggml-ne-order if it is in ggml order")
        if m4.shape[-2] < Q:
            raise framework_error("ggml_soft_max_ext", "GGML_ASSERT", f"mask->ne[1] >= a->ne[1] ({m4.shape[-2]} < {Q})",
                                  "the mask needs a row per token")
        if m4.shape[-2] > Q:
            b.step(f"rows [:{Q}] (the rest is GGML_KQ_MASK_PAD padding)", m4.shape, m4.shape[:2] + (Q, K))
            m4 = m4[:, :, :Q, :]
        m4 = expand_heads_by_modulo(b, m4, 1, H, "heads")
        m4 = expand_heads_by_modulo(b, m4, 0, B, "streams")
        values = as_f64(m4)
        if slopes is not None:
            finite = np.isfinite(values)
            values = np.where(finite, values * slopes[None, :, None, None], values)
            b.step("× ALiBi slope per head (soft_max_ext max_bias 8)", m4.shape, m4.shape)
        b.step("+ KQ mask (0 keep, -inf block, finite = ALiBi distance)", m4.shape, b.shape)
        b.add(values)
        b.extra["polarity"] = "additive"
    elif opts.positions is not None:
        q_pos, k_pos = (np.atleast_2d(np.asarray(p)) for p in opts.positions)
        if q_pos.shape[-1] != Q or k_pos.shape[-1] != K or q_pos.shape[0] not in (1, B) or k_pos.shape[0] not in (1, B):
            raise TracerError(f"--positions need query positions (Q,) or (B,Q) = ({Q},) and cell positions (K,) or (B,K) = "
                              f"({K},); got {fmt_shape(q_pos.shape)} and {fmt_shape(k_pos.shape)}")
        q_b = np.broadcast_to(q_pos, (B, Q))
        k_b = np.broadcast_to(k_pos, (B, K))
        keep = positions_keep(q_b, k_b, causal=not opts.bidirectional, n_swa=opts.window)  # [B, Q, K]
        b.step("set_input_kq_mask: drop empty cells (pos -1)" + (", p0 > p1 (causal)" if not opts.bidirectional else "")
               + (f", p1 - p0 >= n_swa={opts.window}" if opts.window else ""), (B, Q, K), (B, 1, Q, K), ("B", "Q", "K"))
        b.block(keep[:, None], "-inf")
        b.note("causality comes from positions: contiguous positions after a cache make it bottom-right")
        if opts.window is not None:
            warn_window(b, opts.window)
        if slopes is not None:
            dist = -np.abs(q_b[:, :, None] - k_b[:, None, :]).astype(np.float64)  # [B, Q, K]
            b.add(dist[:, None] * slopes[None, :, None, None], user=False, label="ALiBi")
            b.step("+ -|p0 - p1| × slope (ALiBi)", (B, Q, K), b.shape)
        b.extra["positions"] = {"q": q_b, "k": k_b}
    else:
        raise TracerError("--convention ggml-kq-mask needs --mask (the KQ mask) or --positions Q_POS,K_POS")
    if opts.score_dtype == "float16":
        b.note("with flash attention the KQ mask is cast to F16 (values beyond ±65504 become ±inf)")
    return b.finish()
