"""The knobs a convention may read. One frozen dataclass so every convention sees the same names."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from tracer.errors import TracerError

ALIGNS = ("top-left", "bottom-right")
HF_IMPLS = ("sdpa", "eager", "flash")
ALIBI_FORMS = ("fa", "bloom", "ggml")
SCORE_DTYPES = ("float32", "float16", "bfloat16", "float64")


@dataclass(frozen=True)
class MaskOptions:
    score_dtype: str = "float32"  # the dtype scores and fills live in
    mask_dtype: str | None = None  # dtype for a LITERAL mask (files keep theirs)
    is_causal: bool = False
    causal_align: str | None = None  # None = the convention's own
    past: int | None = None  # tokens already in the cache (query i sits at key slot i + past)
    window: int | None = None  # W keys including the query itself
    window_lr: tuple[int, int] | None = None  # inclusive (left, right) offsets, -1 = unbounded
    positions: tuple[np.ndarray, np.ndarray] | None = None  # ggml: query positions [B|1, Q], cell positions [B|1, K]
    hf_impl: str = "sdpa"
    bidirectional: bool = False  # hf-2d encoder mask; T5 encoder buckets; ggml non-causal
    heads: int | None = None  # total heads the ALiBi slopes are computed for (default: H of the scores)
    alibi: bool = False  # add ALiBi (flash-attn alibi_slopes; ggml max_bias 8 slopes)
    alibi_form: str = "fa"
    buckets: int = 32  # T5
    max_distance: int = 128  # T5
    fa_version: str = "2.1"  # flash-attn: "2.0" (top-left causal) or "2.1" (bottom-right)
    keras2: bool = False  # tf-keras 2: additive (1-m)*-1e9 instead of Keras 3 where + zeroing
    ggml_ne_order: bool = False  # the ggml mask is given in ggml ne order [n_kv, n_tok, 1, n_stream]
    kpm: object | None = None  # torch MHA key_padding_mask (a MaskSource or array) next to attn_mask
    q_lengths: tuple[int, ...] | None = None  # jax query_seq_lengths
    need_weights: bool = True  # torch MHA
    fill: float | None = None  # bert-extended / tf-keras fill override
    soft_threshold: float = -1e4  # finite values <= this count as (soft) blocks
    score_range: float | None = None  # the largest |score| you expect; sets when ML003 warns

    def __post_init__(self):
        if self.score_dtype not in SCORE_DTYPES:
            raise TracerError(f"--score-dtype {self.score_dtype}: use one of " + ", ".join(SCORE_DTYPES))
        if self.causal_align is not None and self.causal_align not in ALIGNS:
            raise TracerError(f"--causal-align {self.causal_align}: use top-left or bottom-right")
        if self.hf_impl not in HF_IMPLS:
            raise TracerError(f"--hf-impl {self.hf_impl}: use one of " + ", ".join(HF_IMPLS))
        if self.alibi_form not in ALIBI_FORMS:
            raise TracerError(f"--alibi-form {self.alibi_form}: use one of " + ", ".join(ALIBI_FORMS))
        if self.fa_version not in ("2.0", "2.1"):
            raise TracerError(f"--fa-version {self.fa_version}: use 2.0 or 2.1 (2.1 and later share the 2.1 rule)")
        if self.window is not None and self.window_lr is not None:
            raise TracerError("give --window W or --window-lr L,R, not both")
        if self.past is not None and self.past < 0:
            raise TracerError("--past must be >= 0")
        if self.window is not None and self.window < 1:
            raise TracerError("--window W counts keys including the query itself: W >= 1")

    def replace(self, **changes) -> "MaskOptions":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return MaskOptions(**values)

    @classmethod
    def from_kwargs(cls, **kwargs) -> "MaskOptions":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown mask option(s): {', '.join(unknown)}")
        return cls(**kwargs)
