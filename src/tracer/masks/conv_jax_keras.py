"""JAX, Flax and Keras conventions (reference §1, §2.4, §2.5).

JAX and Flax replace blocked logits with a large finite negative (jnp.where), so a fully masked
row comes out uniform. Keras 3 zeroes masked probabilities after the softmax (zeros); tf-keras 2
adds (1 - mask) * -1e9. All causal masks here are top-left.
"""

from __future__ import annotations

import numpy as np

from tracer.errors import TracerError
from tracer.masks.broadcast import right_align
from tracer.masks.canon import Builder
from tracer.masks.common import apply_causal, apply_window, as_f64, dtype_of, framework_error, is_bool, refuse_unused
from tracer.masks.generated import window_lr_keep
from tracer.masks.literal import MaskSource, finfo_max, finfo_min
from tracer.masks.result import MaskResult, fmt_shape
from tracer.masks.warnings import warn_causal_plus_mask, warn_window

JAX = "jax.nn.dot_product_attention"


def jax_broadcast_error(mask_shape, score_shape) -> str:
    return f"Incompatible shapes for broadcasting: shapes=[{tuple(mask_shape)}, {tuple(score_shape)}]"


def jax_large_negative(score_dtype: str) -> float:
    """_get_large_negative: -0.7 * finfo(dtype).max, computed in at most float32."""
    dtype = "float32" if score_dtype == "float64" else score_dtype
    return -0.7 * finfo_max(dtype)


def jax_generated(b: Builder, how: str, has_mask: bool) -> None:
    """is_causal (top-left) and local_window_size (top-left, inclusive) as jax.nn.dot_product_attention builds them."""
    B, H, Q, K = b.shape
    if b.opts.causal_align == "bottom-right":
        raise TracerError("JAX's is_causal and local_window_size are always top-left (no offset)",
                          hint="for a bottom-right mask build it yourself and pass it as mask=")
    if b.opts.is_causal:
        if has_mask:
            warn_causal_plus_mask(b, "JAX ANDs is_causal with the mask (shown)")
        apply_causal(b, "top-left", how=how, label="∧ is_causal: tril(ones(T,S)) (top-left)")
    if b.opts.window is not None:
        w = b.opts.window
        b.block(window_lr_keep(Q, K, w - 1, 0, 0), how)
        b.step(f"∧ local_window_size=({w - 1},0) (top-left, inclusive: {w} keys incl. self)", (Q, K), b.shape, ("Q", "K"))
        warn_window(b, w)
    elif b.opts.window_lr is not None:
        apply_window(b, 0, how=how, label=" (local_window_size, top-left)")


def build_jax_bool(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"is_causal", "window", "window_lr", "causal_align"})
    b.extra["polarity"] = "keep"
    b.set_replace_fill(jax_large_negative(opts.score_dtype))
    b.hard_outcome = "uniform"
    b.outcome_notes.update({"jax.nn.dot_product_attention (xla)": "uniform (mean of V)"})
    if not src.is_none:
        m = src.resolve(("bool",), opts.score_dtype)
        if not is_bool(m):
            raise framework_error(JAX, "ValueError", f"the mask must be bool, got {dtype_of(m)}",
                                  "_apply_masks combines masks with logical ops; an additive float belongs in bias=",
                                  hint="mask = m > 0, or pass the float array as bias=")

        def reject(reason):
            return framework_error(JAX, "ValueError", jax_broadcast_error(m.shape, b.shape), reason)

        m4 = right_align(b, m, reject, "JAX")
        b.step(f"jnp.where(mask, logits, -0.7*finfo.max = {b.replace_fill:.4g})", m4.shape, m4.shape)
        b.block(m4, "replace", user=True)
    jax_generated(b, "replace", not src.is_none)
    return b.finish()


def build_jax_seqlens(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"is_causal", "window", "window_lr", "q_lengths", "causal_align"})
    b.extra["polarity"] = "keep"
    b.set_replace_fill(jax_large_negative(opts.score_dtype))
    b.hard_outcome = "uniform"
    B, H, Q, K = b.shape
    keep = np.ones((B, 1, Q, K), dtype=bool)
    if not src.is_none:
        kv = src.resolve(("int64",), opts.score_dtype)
        kv = check_lengths(kv, B, K, "key_value_seq_lengths")
        keep &= (np.arange(K)[None, :] < kv[:, None])[:, None, None, :]
        b.step("key_value_seq_lengths: keep kv < len[b]", (B,), (B, 1, 1, K), ("B",))
    if opts.q_lengths is not None:
        ql = check_lengths(np.array(opts.q_lengths), B, Q, "query_seq_lengths")
        keep &= (np.arange(Q)[None, :] < ql[:, None])[:, None, :, None]
        b.step("query_seq_lengths: rows q >= len[b] masked (and their output zeroed)", (B,), (B, 1, Q, 1), ("B",))
        b.outcome_notes["padded query rows (query_seq_lengths)"] = "uniform weights, output rows zeroed"
    if src.is_none and opts.q_lengths is None:
        raise TracerError(f"--convention {name} needs --mask KV_LENGTHS (B,) and/or --q-lengths")
    b.block(keep, "replace", user=True)
    jax_generated(b, "replace", True)
    return b.finish()


def check_lengths(a: np.ndarray, B: int, limit: int, what: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind not in "iu":
        raise framework_error(JAX, "ValueError", f"{what} must be an integer array, got {dtype_of(a)}",
                              "sequence lengths count tokens")
    if a.shape != (B,):
        raise framework_error(JAX, "ValueError", f"{what} must have shape (B,) = ({B},), got {fmt_shape(a.shape)}",
                              "one length per batch row")
    if (a < 0).any() or (a > limit).any():
        raise TracerError(f"{what} {a.tolist()} must lie in 0..{limit}")
    return a.astype(np.int64)


def build_flax(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"is_causal"}, "Flax builds masks with make_attention_mask / make_causal_mask")
    b.extra["polarity"] = "keep"
    b.set_replace_fill(finfo_min(opts.score_dtype))
    b.hard_outcome = "uniform"
    b.outcome_notes.update({"flax dot_product_attention_weights": "uniform (verified 0.25 each for 4 keys)"})
    B, H, Q, K = b.shape
    if not src.is_none:
        m = src.resolve(("float32",), opts.score_dtype)
        values = as_f64(m)
        if (values < 0).any():
            b.warn("ML001", "Flax reads the mask as truthy = keep: negative values such as -inf (an additive mask) count "
                   "as KEEP and 0 as block; pass additive values as bias=")
        keep = (values != 0)

        def reject(reason):
            return framework_error("flax.linen.dot_product_attention", "ValueError",
                                   jax_broadcast_error(m.shape, b.shape), reason)

        m4 = right_align(b, keep, reject, "Flax")
        b.step(f"truthy = keep; jnp.where(mask, w, finfo.min = {b.replace_fill:.4g}) (replace, not add)", m4.shape, m4.shape)
        b.block(m4, "replace", user=True)
    if opts.is_causal:
        if Q != K:
            raise TracerError("make_causal_mask(x) builds a square (L,L) mask; with Q != K build it with "
                              "make_attention_mask(q_pos, k_pos, jnp.greater_equal)")
        if not src.is_none:
            warn_causal_plus_mask(b, "combine_masks ANDs make_causal_mask with the mask (shown)")
        apply_causal(b, "top-left", how="replace", label="∧ make_causal_mask (q >= k, top-left), combine_masks = AND")
    return b.finish()


def build_keras(src: MaskSource, shape, opts, name: str, summary: str) -> MaskResult:
    b = Builder(name, summary, shape, opts, src)
    refuse_unused(b, {"is_causal", "keras2", "fill"}, "Keras takes attention_mask and use_causal_mask")
    b.extra["polarity"] = "keep"
    B, H, Q, K = b.shape
    keep = np.ones(b.shape, dtype=bool)
    user = None
    if not src.is_none:
        m = src.resolve(("bool",), opts.score_dtype)
        if is_bool(m):
            mk = m
        else:
            mk = as_f64(m) > 0.5
            b.note(f"a {dtype_of(m)} mask is cast: values > 0.5 keep")
        if mk.ndim not in (2, 3, 4):
            raise framework_error("keras.layers.MultiHeadAttention", "ValueError",
                                  f"The `mask` must be broadcastable to the attention scores; got {fmt_shape(m.shape)}",
                                  "Keras expects (B,T,S) and inserts the head axis itself",
                                  hint="(B,S) padding: m[:, None, :] -> (B,1,S)")
        if mk.ndim == 4:  # keras 3.15 expands 4 - ndim times at -3: a 4-D mask is used as it is (checked live)
            expanded = mk
            b.step("4-D: no axis inserted (Keras expands 4 - ndim times), then broadcast", mk.shape, mk.shape,
                   ("B", "H", "Q", "K"))
        else:
            expanded = np.expand_dims(mk, axis=-3)
            b.step("insert-head-axis@-3 (expand_dims(axis=-3), not right-aligned)", mk.shape, expanded.shape,
                   ("B", "Q", "K") if mk.ndim == 3 else ("Q", "K"))
        if mk.ndim == 2 and mk.shape[0] == B and B > 1:
            b.warn("ML006", f"Keras inserts the head axis at -3, so the 2-D mask {fmt_shape(mk.shape)} becomes "
                   f"{fmt_shape((1,) + mk.shape)}: its rows land on the QUERIES, not the batch"
                   f"{' (silently, because B == T)' if B == Q else ''}; a (B,S) padding mask must be m[:, None, :]",
                   lands_on="Q")

        def reject(reason):
            return framework_error("keras.layers.MultiHeadAttention", "ValueError",
                                   f"The `mask` must be broadcastable to the attention scores {fmt_shape(b.shape)}; "
                                   f"got {fmt_shape(expanded.shape)}", reason, hint="(B,S) padding: m[:, None, :]")

        m4 = right_align(b, expanded, reject, "Keras", check_axes=False)
        keep &= m4
        user = np.broadcast_to(m4, b.shape).copy()
    if opts.is_causal:
        if not src.is_none:
            warn_causal_plus_mask(b, "Keras ANDs use_causal_mask with attention_mask (shown)")
        from tracer.masks.generated import causal_keep

        offset, align = b.causal_offset_for("top-left", Q, K)
        b.causal_offset = offset
        keep &= causal_keep(Q, K, offset)
        b.step("∧ use_causal_mask: row >= col on (1,T,S) (top-left)", (Q, K), b.shape, ("Q", "K"))
    if opts.keras2:
        fill = opts.fill if opts.fill is not None else (finfo_min("float16") / 2 if opts.score_dtype == "float16" else -1e9)
        b.step(f"tf-keras 2 Softmax: scores += (1 - mask) * {fill:.4g} (additive)", b.shape, b.shape)
        b.block(keep, fill)
        b.hard_outcome = "nan"
        b.outcome_notes.update({"tf-keras 2 (additive -1e9)": "near-uniform or the unmasked distribution"})
    else:
        if opts.fill is not None:
            raise TracerError("--fill applies to --keras2 (additive); Keras 3 zeroes masked probabilities")
        b.step("Keras 3 Softmax: where(mask, x, -1e9), then masked probabilities set to 0 (a hard block)",
               b.shape, b.shape)
        b.block(keep, "-inf")
        b.hard_outcome = "zeros"
        b.outcome_notes.update({"Keras 3 (masked probabilities zeroed)": "zeros"})
    b.user_keep = user
    return b.finish()
