"""Spec: everything the engine needs to know about an architecture, as plain data."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class RopeSpec:
    theta: float
    rotary_dim: int  # leading dims of each head that rotate (partial rotary: < d_head)
    scaling: str = "default"  # default | linear | llama3
    factor: float = 1.0
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    original_max_positions: int = 8192  # llama3


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
    norm_placement: str = "pre"  # "pre" | "post"
    final_norm: bool = True
    # positions
    positions: str = "rotary"  # "learned" | "rotary"
    position_offset: int = 0  # OPT stores learned positions shifted by 2
    rope: RopeSpec | None = None
    # attention
    causal: bool = True
    qkv_bias: bool = False
    o_bias: bool = False
    attn_scale: float | None = None  # None: 1/sqrt(d_head)
    sliding_window: tuple[int | None, ...] = ()  # per layer: None = full attention
    # MLP
    mlp: str = "gated"  # "gated" | "plain"
    activation: str = "silu"  # silu | gelu | gelu_tanh | relu
    mlp_bias: bool = False
    # residual stream
    residual: str = "sequential"  # "sequential" | "parallel"
    embed_scale: float | None = None  # gemma: sqrt(d_model), applied in the compute dtype
    tied_embeddings: bool = False
    head_bias: bool = False
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
    def attention_kind(self) -> str:
        if self.n_kv_heads == self.n_heads:
            return "multi-head"
        if self.n_kv_heads == 1:
            return "multi-query"
        return f"grouped-query ({self.group_size} query heads per kv head)"

    def to_dict(self) -> dict:
        return asdict(self)
