"""Llama and its close relatives (mistral, qwen2, gemma, phi3 build on these two functions)."""

from __future__ import annotations

from tracer.arch.canonical import Source, transposed
from tracer.arch.spec import RopeSpec, Spec
from tracer.checkpoint.config import require, rope_parameters
from tracer.errors import TracerError

HF_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
}


def activation(cfg: dict, family: str, *keys: str) -> str:
    name = next((cfg[k] for k in keys if cfg.get(k)), None) or "silu"
    if name not in HF_ACTIVATIONS:
        raise TracerError(f"{family}: activation {name!r} is not supported", hint="supported: " + ", ".join(HF_ACTIVATIONS))
    return HF_ACTIVATIONS[name]


def rope_spec(cfg: dict, d_head: int, family: str) -> RopeSpec:
    rp = rope_parameters(cfg)
    kind = rp.get("rope_type", "default")
    rotary_dim = int(d_head * float(rp.get("partial_rotary_factor", 1.0)))
    if kind not in ("default", "linear", "llama3"):
        raise TracerError(f"{family}: rope type {kind!r} is not supported yet", hint="supported: default, linear, llama3")
    extra = {}
    if kind in ("linear", "llama3"):
        extra["factor"] = float(rp["factor"])
    if kind == "llama3":
        extra.update(
            low_freq_factor=float(rp["low_freq_factor"]),
            high_freq_factor=float(rp["high_freq_factor"]),
            original_max_positions=int(rp["original_max_position_embeddings"]),
        )
    return RopeSpec(theta=float(rp["rope_theta"]), rotary_dim=rotary_dim, scaling=kind, **extra)


def llama_spec(cfg: dict, family: str, **overrides) -> Spec:
    d_model = int(require(cfg, "hidden_size", family=family))
    n_heads = int(require(cfg, "num_attention_heads", family=family))
    n_kv = int(cfg.get("num_key_value_heads") or n_heads)
    d_head = int(cfg.get("head_dim") or d_model // n_heads)
    n_layers = int(require(cfg, "num_hidden_layers", family=family))
    if n_heads % n_kv:
        raise TracerError(f"{family}: num_attention_heads={n_heads} is not a multiple of num_key_value_heads={n_kv}")
    fields = dict(
        family=family,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        d_head=d_head,
        d_ff=int(require(cfg, "intermediate_size", family=family)),
        vocab_size=int(require(cfg, "vocab_size", family=family)),
        max_positions=None,  # rotary: no table, max_position_embeddings is advisory
        norm="rmsnorm",
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        positions="rotary",
        rope=rope_spec(cfg, d_head, family),
        qkv_bias=bool(cfg.get("attention_bias", False)),
        o_bias=bool(cfg.get("attention_bias", False)),
        mlp="gated",
        activation=activation(cfg, family, "hidden_act", "hidden_activation"),
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        extras={"max_position_embeddings": cfg.get("max_position_embeddings")},
    )
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
        src[p + "mlp.W_in"] = transposed(hf + "mlp.gate_proj.weight")
        src[p + "mlp.W_up"] = transposed(hf + "mlp.up_proj.weight")
        src[p + "mlp.W_out"] = transposed(hf + "mlp.down_proj.weight")
    src["final_norm.w"] = Source(f"{prefix}.norm.weight")
    src["unembed.W_U"] = head_source(spec, f"{prefix}.embed_tokens.weight", "lm_head.weight")
    return src


def head_source(spec: Spec, embed_name: str, head_name: str) -> Source:
    """The unembedding [d_model, vocab]: the tied embedding, or the separate head, transposed."""
    return transposed(embed_name if spec.tied_embeddings else head_name)


def spec_from_config(cfg: dict) -> Spec:
    return llama_spec(cfg, "llama")


def weight_sources(spec: Spec) -> dict[str, Source]:
    return llama_weights(spec)
