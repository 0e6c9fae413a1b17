"""Spec: everything the engine needs to know about an architecture, as plain data."""

from __future__ import annotations

import types
import typing
from dataclasses import asdict, dataclass, field, fields, is_dataclass


@dataclass(frozen=True)
class RopeSpec:
    theta: float
    rotary_dim: int  # leading dims of each head that rotate (partial rotary: < d_head)
    scaling: str = "default"  # default | linear | llama3 | dynamic | yarn | longrope
    factor: float = 1.0
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    original_max_positions: int = 8192  # llama3, yarn; longrope: the length past which the long factors apply
    max_positions: int | None = None  # dynamic: the config's max_position_embeddings, past which it rescales
    attention_factor: float = 1.0  # yarn, longrope: cos and sin are multiplied by it
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    truncate: bool = True  # yarn: round the correction range outward
    short_factor: tuple[float, ...] = ()  # longrope: per-frequency divisors up to original_max_positions
    long_factor: tuple[float, ...] = ()  # longrope: past it


@dataclass(frozen=True)
class RelativeBiasSpec:
    """T5's relative position bias: key - query distance -> bucket -> a learned bias per head."""

    num_buckets: int
    max_distance: int


@dataclass(frozen=True)
class PoolingSpec:
    """How an encoder without a head turns token vectors into one sentence vector."""

    mode: str = "mean"  # mean | cls | max | mean_sqrt_len | weightedmean | lasttoken
    normalize: bool = False  # L2-normalise the pooled vector
    source: str = "default"  # where the rule was read: "modules.json" or "default"


@dataclass(frozen=True)
class MoeSpec:
    """Mixture of experts in place of the MLP: a router picks top_k of n_experts gated MLPs per token."""

    n_experts: int
    top_k: int
    d_expert: int  # each expert's hidden width
    normalize: bool = True  # renormalise the top-k probabilities to sum to 1 (mixtral; qwen3_moe norm_topk_prob)
    layers: tuple[bool, ...] = ()  # per layer: True = MoE, False = the dense MLP (qwen2/3_moe mlp_only_layers); () = all
    d_shared: int = 0  # qwen2_moe: width of the always-on shared expert, gated by sigmoid(x @ W_gate); 0 = none

    def on(self, layer: int) -> bool:
        return self.layers[layer] if self.layers else True


@dataclass(frozen=True)
class Spec:
    family: str
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_ff: int
    vocab_size: int
    max_positions: int | None  # None: no hard limit in the architecture
    # norms
    norm: str  # "layernorm" | "rmsnorm"
    norm_eps: float
    norm_offset: float = 0.0  # gemma: x * (1 + w)
    # "pre" | "post" | "sandwich" (gemma2: before and after each sublayer) | "after" (olmo2: after each sublayer only)
    norm_placement: str = "pre"
    final_norm: bool = True
    # positions
    positions: str = "rotary"  # "learned" | "rotary" | "relative" (T5 buckets)
    position_offset: int = 0  # OPT and BART store learned positions shifted by 2, RoBERTa by padding_idx + 1
    position_rule: str = "mask"  # "mask": cumsum(mask) - 1 | "index": 0..n-1 whatever the padding (BERT, BART)
    rope: RopeSpec | None = None
    rope_local: RopeSpec | None = None  # gemma3: the rotary of sliding-window layers, when it differs
    relative_bias: RelativeBiasSpec | None = None
    token_types: int = 0  # rows of the segment-embedding table (BERT: 2); 0 = none
    embed_norm: bool = False  # LayerNorm after the embedding sum (BERT, BART)
    # attention
    causal: bool = True
    qkv_bias: bool = False
    o_bias: bool = False
    attn_scale: float | None = None  # None: 1/sqrt(d_head)
    qk_norm: str = "none"  # "none" | "head" (each head over d_head: qwen3, gemma3) | "full" (whole projection: olmo2)
    attn_softcap: float | None = None  # gemma2: scores -> tanh(scores / cap) * cap before the mask
    sliding_window: tuple[int | None, ...] = ()  # per layer: None = full attention
    # MLP
    mlp: str = "gated"  # "gated" | "plain"
    activation: str = "silu"  # silu | gelu | gelu_tanh | relu
    mlp_bias: bool = False
    moe: MoeSpec | None = None  # mixture of experts (mixtral, qwen2_moe, qwen3_moe)
    # residual stream
    residual: str = "sequential"  # "sequential" | "parallel"
    shared_norm: bool = False  # parallel residual with one norm feeding attention and MLP (phi-1/2)
    embed_scale: float | None = None  # gemma: sqrt(d_model), applied in the compute dtype
    tied_embeddings: bool = False
    head_bias: bool = False
    logit_softcap: float | None = None  # gemma2: logits -> tanh(logits / cap) * cap
    d_embed: int | None = None  # OPT word_embed_proj_dim != hidden_size: embeddings projected in and out
    # route and output
    route: str = "decoder"  # "decoder" | "encoder" (bidirectional, no cross) | "encoder-decoder"
    head: str = "lm"  # "lm": logits over the vocabulary | "mlm": dense, act, norm, tied decoder | "none": pooled
    head_activation: str = "gelu"  # the MLM head's activation
    logit_scale: float | None = None  # T5 with a tied head: decoder output * d_model**-0.5 before W_U
    pooling: PoolingSpec | None = None  # head "none": the sentence embedding the checkpoint declares
    encoder: "Spec | None" = None  # encoder-decoder: the encoder stack; this Spec describes the decoder
    extras: dict = field(default_factory=dict)

    @property
    def group_size(self) -> int:
        return self.n_heads // self.n_kv_heads

    @property
    def scale(self) -> float:
        return self.attn_scale if self.attn_scale is not None else self.d_head**-0.5

    def window(self, layer: int) -> int | None:
        return self.sliding_window[layer] if self.sliding_window else None

    @property
    def cross_attention(self) -> bool:
        return self.route == "encoder-decoder"

    @property
    def route_text(self) -> str:
        """The route in words, as the model card says it."""
        if self.route == "encoder":
            return "encoder, bidirectional"
        if self.route == "encoder-decoder":
            return "encoder-decoder: encoder bidirectional, decoder causal + cross-attention"
        return "decoder, causal"

    @property
    def attention_kind(self) -> str:
        if self.n_kv_heads == self.n_heads:
            return "multi-head"
        if self.n_kv_heads == 1:
            return "multi-query"
        return f"grouped-query ({self.group_size} query heads per kv head)"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Spec":
        """The inverse of to_dict (also after a JSON round trip): nested specs come back as dataclasses, lists as
        tuples. Keys this version does not know are ignored, so a newer trace's spec still loads."""
        return _from_dict(cls, d)


def _from_dict(cls, d: dict):
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _from_value(hints[f.name], d[f.name]) for f in fields(cls) if f.name in d})


def _from_value(hint, value):
    """One field's value back from plain data, guided by its annotation (X | None, a dataclass, tuple[...])."""
    if value is None:
        return None
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        kinds = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = kinds[0] if len(kinds) == 1 else object
    if is_dataclass(hint) and isinstance(value, dict):
        return _from_dict(hint, value)
    if typing.get_origin(hint) is tuple and isinstance(value, (list, tuple)):
        return tuple(value)
    return value
