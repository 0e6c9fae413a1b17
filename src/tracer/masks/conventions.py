"""Every mask convention the lab knows, by name, and the one entry point: `canonical_mask`.

    from tracer.masks.conventions import canonical_mask
    r = canonical_mask("hf-2d", np.array([[0, 0, 1, 1], [1, 1, 1, 1]]), (2, 1, 4, 4), past=0)
    r.keep      # bool [B,H,Q,K]
    r.bias      # float64 [B,H,Q,K] or None
    r.steps     # how the mask landed on the scores
    r.warnings  # ML001..ML013

A mask that cannot land on the scores raises TracerError (never a silent broadcast).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from tracer.errors import TracerError
from tracer.masks import conv_bias, conv_hf, conv_jax_keras, conv_kernels, conv_torch
from tracer.masks.literal import MaskSource, load_mask
from tracer.masks.options import MaskOptions
from tracer.masks.result import MaskResult


@dataclass(frozen=True)
class Convention:
    name: str
    family: str
    accepts: str  # what the mask argument may be
    summary: str  # one-line semantics
    build: Callable[..., MaskResult]
    keywords: tuple[str, ...] = ()  # words accepted as --mask as-is (e.g. mlx "causal")

    def run(self, src: MaskSource, shape, opts: MaskOptions) -> MaskResult:
        return self.build(src, shape, opts, self.name, self.summary)


def _c(name, family, accepts, summary, build, keywords=()):
    return Convention(name, family, accepts, summary, build, keywords)


CONVENTIONS: dict[str, Convention] = {c.name: c for c in (
    _c("torch-sdpa-bool", "torch", "bool, >= 2-D", "F.scaled_dot_product_attention bool attn_mask: True = keep; "
       "right-aligned broadcast; is_causal top-left", partial(conv_torch.build_sdpa, flavour="bool")),
    _c("torch-sdpa-float", "torch", "float (query dtype), >= 2-D", "F.scaled_dot_product_attention float attn_mask: "
       "ADDED to the scores (-inf hard, <= -1e4 soft, else bias); right-aligned", partial(conv_torch.build_sdpa, flavour="float")),
    _c("torch-causal-lower-right", "torch", "none", "torch.nn.attention.bias.causal_lower_right(Q,K): keep k <= q + K - Q",
       partial(conv_torch.build_causal_bias, align="bottom-right")),
    _c("torch-causal-upper-left", "torch", "none", "torch.nn.attention.bias.causal_upper_left(Q,K): keep k <= q "
       "(is_causal)", partial(conv_torch.build_causal_bias, align="top-left")),
    _c("torch-mha-bool", "torch", "bool (L,S) or (N*H,L,S)", "nn.MultiheadAttention bool attn_mask: True = BLOCK; "
       "3-D slice b*H+h; --kpm adds a key_padding_mask", partial(conv_torch.build_mha, flavour="bool")),
    _c("torch-mha-float", "torch", "float (L,S) or (N*H,L,S)", "nn.MultiheadAttention float attn_mask: added; same "
       "shapes as torch-mha-bool", partial(conv_torch.build_mha, flavour="float")),
    _c("torch-mha-key-padding", "torch", "bool/float (N,S)", "nn.MultiheadAttention key_padding_mask: True = PAD "
       "(block); viewed (N,1,1,S); float added", conv_torch.build_mha_kpm),
    _c("torch-square-subsequent", "torch", "none", "nn.Transformer.generate_square_subsequent_mask(sz): float 0 / -inf, "
       "top-left, square", conv_torch.build_square_subsequent),
    _c("hf-2d", "transformers", "int/bool/float (B, past+Q)", "transformers attention_mask: nonzero = keep (1 token, "
       "0 pad) at [B,1,1,KV], ∧ causal in cache-index space (bottom-right via --past), ∧ --window W",
       conv_hf.build_hf_2d),
    _c("hf-4d-sdpa", "transformers", "bool (B,1,Q,KV)", "a prepared 4-D mask for the sdpa backend: True = keep, passed "
       "through unchanged to torch SDPA", conv_hf.build_hf_4d_sdpa),
    _c("hf-4d-eager", "transformers", "float (B,1,Q,KV)", "a prepared 4-D mask for eager: added to the scores "
       "(0 keep, finfo.min block); a 0/1 mask blocks nothing", conv_hf.build_hf_4d_eager),
    _c("hf-legacy-4d", "transformers", "0/1 (B,1,Q,KV)", "transformers 4.x user 4-D mask: 1 = keep, inverted "
       "internally to (1-m)*finfo.min", conv_hf.build_hf_legacy_4d),
    _c("bert-extended", "transformers", "0/1 (B,K) or (B,Q,K)", "BERT get_extended_attention_mask: (1 - m) * -10000 "
       "at [B,1,1,K] (--fill min for finfo.min)", conv_hf.build_bert_extended),
    _c("jax-bool", "jax", "bool only, <= 4-D", "jax.nn.dot_product_attention mask: True = keep; right-aligned; "
       "where(mask, s, -0.7*max); is_causal / local_window_size top-left", conv_jax_keras.build_jax_bool),
    _c("jax-seqlens", "jax", "int (B,) kv lengths; --q-lengths", "jax key_value_seq_lengths / query_seq_lengths: keep "
       "k < kv_len, q < q_len (padded query rows: output zeroed)", conv_jax_keras.build_jax_seqlens),
    _c("flax-mask", "jax", "any dtype", "flax.linen dot_product_attention mask: truthy = keep; replaced by "
       "finfo.min; make_causal_mask top-left square", conv_jax_keras.build_flax),
    _c("keras-mha", "keras", "bool or float (T,S), (B,T,S), (B,H,T,S)", "keras MultiHeadAttention attention_mask: True = keep; head axis "
       "INSERTED at -3 (not right-aligned); masked probs zeroed (--keras2: additive -1e9)", conv_jax_keras.build_keras),
    _c("xformers-bias", "xformers", "float, exactly (B,H,Q,K)", "xformers memory_efficient_attention attn_bias tensor: "
       "added, no broadcasting; LowerTriangularMask top-left, ...FromBottomRight", conv_kernels.build_xformers),
    _c("flash-attn", "flash-attn", "none (flags)", "flash_attn_func: no mask tensor; causal bottom-right since 2.1 "
       "(--fa-version 2.0: top-left); window_size=(L,R); --alibi", conv_kernels.build_flash),
    _c("mlx", "mlx", "bool, additive, or 'causal'", "mx.fast.scaled_dot_product_attention: bool True = keep, float "
       "added, 'causal' = bottom-right; right-aligned <= 4-D", conv_kernels.build_mlx, ("causal",)),
    _c("ggml-kq-mask", "llama.cpp", "F32/F16 [n_stream,1,n_tok,n_kv] or --positions", "llama.cpp KQ mask: 0 keep, "
       "-inf block, finite = ALiBi distance; heads broadcast by modulo; or built from positions",
       conv_kernels.build_ggml),
    _c("alibi", "bias", "none, or slopes (H,)/(B,H)", "ALiBi bias -slope·|i + K - Q - j| per head (--alibi-form "
       "fa|bloom|ggml), bottom-right", conv_bias.build_alibi),
    _c("t5-relbias", "bias", "none, or a table (buckets, H)", "T5 relative position buckets (--buckets, --max-distance, "
       "--bidirectional) and, with a table, the bias; no 1/sqrt(d)", conv_bias.build_t5),
    _c("flex-mask-mod", "torch", "a predicate: causal, sliding(W), prefix(L), document(ids)", "torch flex_attention "
       "mask_mod: True = keep over raw (q_idx, kv_idx)", conv_bias.build_flex, conv_bias.FLEX_WORDS),
)}

ALIASES = {"additive": "torch-sdpa-float", "torch-sdpa": "torch-sdpa-bool", "torch-mha": "torch-mha-bool",
           "flash": "flash-attn", "ggml": "ggml-kq-mask", "t5": "t5-relbias", "flex": "flex-mask-mod"}


def get_convention(name: str) -> Convention:
    key = ALIASES.get(name, name)
    if key not in CONVENTIONS:
        close = [n for n in CONVENTIONS if name.split("-")[0] in n][:4]
        raise TracerError(f"unknown convention {name!r}",
                          hint=("did you mean " + ", ".join(close) + "? " if close else "") + "tracer mask --list")
    return CONVENTIONS[key]


def canonical_mask(convention: str, mask_array, score_shape, **options) -> MaskResult:
    """The mask as `convention` applies it, on scores [B,H,Q,K].

    mask_array: an ndarray, a LITERAL / FILE.npy / FILE.npz:KEY string, a keyword ('causal'), a MaskSource,
    or None. options: the fields of MaskOptions (score_dtype, is_causal, causal_align, past, window, ...),
    or `opts=MaskOptions(...)`. Raises TracerError when the framework would reject the mask or it
    cannot land on the scores.
    """
    opts = options.pop("opts", None)
    if opts is None:
        opts = MaskOptions.from_kwargs(**options)
    elif options:
        opts = opts.replace(**options)
    conv = get_convention(convention)
    if isinstance(mask_array, MaskSource):
        src = mask_array
    else:
        src = load_mask(mask_array, opts.score_dtype, opts.mask_dtype, conv.keywords)
    if src.keyword and not conv.keywords:
        raise TracerError(f"--convention {conv.name} takes no keyword mask ({src.keyword!r})")
    shape = tuple(int(n) for n in score_shape)
    return conv.run(src, shape, opts)


def mask_override_parts(result: MaskResult) -> tuple[np.ndarray, np.ndarray | None, str]:
    """(keep, bias, note) for the engine's MaskOverride: soft blocks count as blocked (the engine never leaks)."""
    return result.override_parts()
