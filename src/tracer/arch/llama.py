"""Llama and its close relatives (mistral, qwen2, gemma, phi3 build on these two functions)."""

from __future__ import annotations

import math

from tracer.arch.canonical import Source, transposed
from tracer.arch.spec import RopeSpec, Spec
from tracer.checkpoint.config import cfg_bool, cfg_choice, cfg_float, cfg_int, cfg_list, cfg_size, rope_parameters
from tracer.errors import TracerError

# HF tensors a Llama-layout checkpoint may hold that tracer knowingly does not use (see checkpoint.agreement)
IGNORED = ("*.rotary_emb.inv_freq",)

HF_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
}


def activation(cfg: dict, family: str, key: str, default: str = "silu") -> str:
    """The activation `key` names; `default`: the config class's own when the field is missing."""
    return HF_ACTIVATIONS[cfg_choice(cfg, key, family, HF_ACTIVATIONS, default=default)]


# What a config class of transformers 5.24 gives a field the config.json lacks, where it is not llama's.
# (family -> {field: default}); and the fields whose null it reads as "missing" (declared `X | None`).
DEFAULTS = {
    "mixtral": {"rms_norm_eps": 1e-5, "rope_theta": 1e6}, "phi3": {"rms_norm_eps": 1e-5},
    "olmo2": {"rms_norm_eps": 1e-5}, "gemma": {"hidden_act": "gelu_pytorch_tanh", "head_dim": 256},
    "gemma2": {"head_dim": 256}, "gemma3_text": {"head_dim": 256}, "qwen3": {"head_dim": 128},
    "starcoder2": {"hidden_act": "gelu_pytorch_tanh"}, "phi": {"hidden_act": "gelu_new", "partial_rotary_factor": 0.5},
    "gpt_neox": {"partial_rotary_factor": 0.25},
}
NULLABLE = {
    "llama": ("head_dim", "num_key_value_heads"), "mistral": ("head_dim",), "mixtral": ("head_dim",),
    "starcoder2": ("head_dim",), "olmo2": ("num_key_value_heads",), "phi": ("num_key_value_heads",),
    "phi3": ("num_key_value_heads",), "qwen2": ("num_key_value_heads",), "qwen3": ("num_key_value_heads",),
}


def class_default(family: str, key: str, fallback):
    return DEFAULTS.get(family, {}).get(key, fallback)


ROPE_TYPES = ("default", "linear", "llama3", "dynamic", "yarn", "longrope")


def rope_spec(cfg: dict, d_head: int, family: str, params: dict | None = None) -> RopeSpec:
    """The rotary embedding a config declares (`params`: one layer type's rope_parameters, gemma3)."""
    rp = params if params is not None else rope_parameters(cfg, class_default(family, "rope_theta", 10000.0), family,
                                                            class_default(family, "partial_rotary_factor", 1.0))
    kind = cfg_choice(rp, "rope_type", family, ROPE_TYPES, default="default")
    factor = cfg_float(rp, "partial_rotary_factor", family, above=0.0, maximum=1.0, default=1.0)
    rotary_dim = int(d_head * factor)
    if rotary_dim < 2 or rotary_dim % 2:
        raise TracerError(f"config.json ({family}): partial_rotary_factor {factor:g} of head_dim {d_head} gives "
                          f"{rotary_dim} rotary dims, expected an even number >= 2")
    top = cfg_size(cfg, "max_position_embeddings", family, "positions", default=None)
    # transformers: a top-level original_max_position_embeddings (phi3) wins over the one in rope_parameters
    original = (cfg_size(cfg, "original_max_position_embeddings", family, "positions", default=None, nullable=True)
                or cfg_size(rp, "original_max_position_embeddings", family, "positions", default=None,
                            nullable=kind not in ("yarn", "longrope")) or top)  # they index with it
    extra: dict = {}
    if kind in ("linear", "llama3", "dynamic"):
        extra["factor"] = cfg_float(rp, "factor", family, above=0.0)
    if kind == "llama3":
        low = cfg_float(rp, "low_freq_factor", family, above=0.0)
        high = cfg_float(rp, "high_freq_factor", family, above=low)
        extra.update(low_freq_factor=low, high_freq_factor=high,
                     original_max_positions=cfg_size(rp, "original_max_position_embeddings", family, "positions"))
    if kind in ("dynamic", "yarn", "longrope") and (top is None or original is None):
        raise TracerError(f"config.json ({family}): rope type {kind} needs max_position_embeddings")
    if kind == "dynamic":
        if rotary_dim == 2:  # theta ** (dim / (dim - 2)): transformers divides by zero
            raise TracerError(f"config.json ({family}): rope type dynamic needs more than 2 rotary dims, got 2")
        extra["max_positions"] = top
    if kind == "yarn":
        extra.update(_yarn_fields(rp, top, original, family))
    if kind == "longrope":
        extra.update(_longrope_fields(rp, top, original, rotary_dim, family))
    theta = cfg_float(rp, "rope_theta", family, above=0.0)
    return RopeSpec(theta=theta, rotary_dim=rotary_dim, scaling=kind, **extra)


def head_sizes(cfg: dict, family: str, d_model: int, n_heads: int, key: str | None = "head_dim") -> int:
    """d_head: the config's `key` (head_dim) when given (else the class's default), else d_model / n_heads."""
    nullable = key in NULLABLE.get(family, ())
    d_head = cfg_size(cfg, key, family, "d_model", default=class_default(family, key, None), nullable=nullable) if key else None
    if d_head is not None:
        return d_head
    if d_model % n_heads:
        raise TracerError(f"config.json ({family}): hidden_size {d_model} is not a multiple of "
                          f"num_attention_heads {n_heads}, and there is no head_dim")
    return d_model // n_heads


def _yarn_fields(rp: dict, top: int, original: int, family: str) -> dict:
    """transformers' _compute_yarn_parameters: factor, attention factor (mscale), correction range inputs."""
    factor = cfg_float(rp, "factor", family, above=0.0, default=None, nullable=True) or top / original
    attention = cfg_float(rp, "attention_factor", family, above=0.0, default=None, nullable=True)
    if attention is None:
        mscale = cfg_float(rp, "mscale", family, default=None, nullable=True)
        mscale_all = cfg_float(rp, "mscale_all_dim", family, default=None, nullable=True)
        attention = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all) if mscale and mscale_all else _yarn_mscale(factor)
    return dict(factor=factor, attention_factor=float(attention), original_max_positions=original,
                beta_fast=cfg_float(rp, "beta_fast", family, above=0.0, default=None, nullable=True) or 32.0,
                beta_slow=cfg_float(rp, "beta_slow", family, above=0.0, default=None, nullable=True) or 1.0,
                # transformers reads truncate with .get("truncate", True): a null is falsy, no rounding
                truncate=False if "truncate" in rp and rp["truncate"] is None else cfg_bool(rp, "truncate", family, default=True))


def _yarn_mscale(scale: float, mscale: float = 1) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _longrope_fields(rp: dict, top: int, original: int, rotary_dim: int, family: str) -> dict:
    """transformers' _compute_longrope_parameters: short/long factors and the attention factor."""
    half = rotary_dim // 2
    short, long = (tuple(_positive_numbers(cfg_list(rp, key, family, length=half), key, family))
                   for key in ("short_factor", "long_factor"))
    factor = cfg_float(rp, "factor", family, above=0.0, default=None, nullable=True) or top / original
    attention = cfg_float(rp, "attention_factor", family, above=0.0, default=None, nullable=True)
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    return dict(factor=factor, attention_factor=float(attention), original_max_positions=original,
                short_factor=short, long_factor=long)


def _positive_numbers(values: list, key: str, family: str) -> list[float]:
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in values):
        raise TracerError(f"config.json ({family}): {key} must hold finite numbers > 0")
    return [float(v) for v in values]


def llama_spec(cfg: dict, family: str, **overrides) -> Spec:
    d_model = cfg_size(cfg, "hidden_size", family, "d_model")
    n_heads = cfg_size(cfg, "num_attention_heads", family, "heads")
    n_kv = cfg_int(cfg, "num_key_value_heads", family, minimum=1, maximum=n_heads, default=n_heads,
                   nullable="num_key_value_heads" in NULLABLE.get(family, ()))
    d_head = head_sizes(cfg, family, d_model, n_heads)
    n_layers = cfg_size(cfg, "num_hidden_layers", family, "layers")
    if n_heads % n_kv:
        raise TracerError(f"{family}: num_attention_heads={n_heads} is not a multiple of num_key_value_heads={n_kv}")
    read = {  # read only when the adapter does not say otherwise (phi has no rms_norm_eps to refuse)
        "d_ff": lambda: cfg_size(cfg, "intermediate_size", family, "d_ff"),
        "vocab_size": lambda: cfg_size(cfg, "vocab_size", family, "vocab"),
        "norm_eps": lambda: cfg_float(cfg, "rms_norm_eps", family, minimum=0.0, maximum=1.0,
                                      default=class_default(family, "rms_norm_eps", 1e-6)),
        "rope": lambda: rope_spec(cfg, d_head, family),
        "qkv_bias": lambda: cfg_bool(cfg, "attention_bias", family, default=False),
        "o_bias": lambda: cfg_bool(cfg, "attention_bias", family, default=False),
        "activation": lambda: activation(cfg, family, "hidden_act", class_default(family, "hidden_act", "silu")),
        "mlp_bias": lambda: cfg_bool(cfg, "mlp_bias", family, default=False),
        "tied_embeddings": lambda: cfg_bool(cfg, "tie_word_embeddings", family, default=False),
        "extras": lambda: {"max_position_embeddings": cfg_size(cfg, "max_position_embeddings", family, "positions",
                                                               default=None)},
    }
    fields = dict(family=family, d_model=d_model, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv, d_head=d_head,
                  max_positions=None,  # rotary: no table, max_position_embeddings is advisory
                  norm="rmsnorm", positions="rotary", mlp="gated")
    fields.update({name: overrides[name] if name in overrides else get() for name, get in read.items()})
    fields.update(overrides)
    return Spec(**fields)


def llama_weights(spec: Spec, prefix: str = "model") -> dict[str, Source]:
    """HF names of a Llama-layout checkpoint: separate q/k/v, gate/up/down, RMSNorm weights."""
    src: dict[str, Source] = {"embed.W_E": Source(f"{prefix}.embed_tokens.weight")}
    for i in range(spec.n_layers):
        hf, p = f"{prefix}.layers.{i}.", f"blocks.{i}."
        src[p + "ln1.w"] = Source(hf + "input_layernorm.weight")
        src[p + "ln2.w"] = Source(hf + "post_attention_layernorm.weight")
        for x in "qkv":
            src[p + f"attn.W_{x}"] = transposed(hf + f"self_attn.{x}_proj.weight")
            if spec.qkv_bias:
                src[p + f"attn.b_{x}"] = Source(hf + f"self_attn.{x}_proj.bias")
        src[p + "attn.W_o"] = transposed(hf + "self_attn.o_proj.weight")
        if spec.o_bias:
            src[p + "attn.b_o"] = Source(hf + "self_attn.o_proj.bias")
        for ours, theirs in (("in", "gate_proj"), ("up", "up_proj"), ("out", "down_proj")):
            src[p + f"mlp.W_{ours}"] = transposed(hf + f"mlp.{theirs}.weight")
            if spec.mlp_bias:  # llama's `mlp_bias`: all three projections carry one
                src[p + f"mlp.b_{ours}"] = Source(hf + f"mlp.{theirs}.bias")
    src["final_norm.w"] = Source(f"{prefix}.norm.weight")
    src["unembed.W_U"] = head_source(spec, f"{prefix}.embed_tokens.weight", "lm_head.weight")
    return src


def own_or_tied(own: str, tied_to: str, tied: bool, transform=None, aliases: tuple[str, ...] = ()) -> Source:
    """A tensor transformers may tie to another: the checkpoint's own copy when it holds one, else (when tied)
    the tensor it is tied to. transformers 5 does the same: it does not tie two tensors the checkpoint holds
    with different values, and an untied tensor the checkpoint lacks is no weight at all (tracer: an error)."""
    names = (*aliases, *((tied_to,) if tied else ()))
    if transform is None:
        return Source(own, aliases=names, supersedes=(tied_to,))
    return Source(own, transform, names, supersedes=(tied_to,))


def head_source(spec: Spec, embed_name: str, head_name: str, aliases: tuple[str, ...] = ()) -> Source:
    """The unembedding [d_model, vocab], transposed: the separate head, or (tied) the embedding."""
    return own_or_tied(head_name, embed_name, spec.tied_embeddings, lambda a: a.T, aliases)


def spec_from_config(cfg: dict) -> Spec:
    return llama_spec(cfg, "llama")


def weight_sources(spec: Spec) -> dict[str, Source]:
    return llama_weights(spec)
