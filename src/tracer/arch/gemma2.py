"""Gemma-2: Gemma (x * (1 + w) RMSNorm, sqrt(d_model) embedding scale, GeGLU, tied head) with norms before
and after each sublayer, attention scores and final logits soft-capped (tanh(s / cap) * cap), queries scaled
by query_pre_attn_scalar^-0.5, and sliding-window layers alternating with global ones (`layer_types`)."""

import math

from tracer.arch.canonical import Source
from tracer.arch.llama import llama_spec, llama_weights


def layer_windows(cfg: dict, default_types) -> tuple[int | None, ...]:
    """Per layer: the window for "sliding_attention" layers, None for "full_attention"."""
    n_layers = int(cfg.get("num_hidden_layers", 0))
    types = cfg.get("layer_types") or default_types(n_layers)
    window = cfg.get("sliding_window")
    return tuple(int(window) if t == "sliding_attention" and window else None for t in types)


def _alternating(n_layers: int) -> list[str]:
    return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]


def gemma2_fields(cfg: dict, default_types=_alternating) -> dict:
    """The Spec fields Gemma-2 and Gemma-3 share."""
    d_model = int(cfg.get("hidden_size", 0))
    scalar = cfg.get("query_pre_attn_scalar")
    return dict(
        norm_offset=1.0,
        norm_placement="sandwich",
        embed_scale=math.sqrt(d_model),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        causal=not cfg.get("use_bidirectional_attention", False),
        attn_scale=float(scalar) ** -0.5 if scalar else None,
        attn_softcap=_float_or_none(cfg.get("attn_logit_softcapping")),
        logit_softcap=_float_or_none(cfg.get("final_logit_softcapping")),
        sliding_window=layer_windows(cfg, default_types),
    )


def _float_or_none(value):
    return float(value) if value is not None else None


def sandwich_weights(spec, src: dict, prefix: str = "model") -> dict:
    """Llama-layout names, with Gemma-2's four norms per block."""
    for i in range(spec.n_layers):
        hf, p = f"{prefix}.layers.{i}.", f"blocks.{i}."
        src[p + "ln1.w"] = Source(hf + "input_layernorm.weight")
        src[p + "ln1_post.w"] = Source(hf + "post_attention_layernorm.weight")
        src[p + "ln2.w"] = Source(hf + "pre_feedforward_layernorm.weight")
        src[p + "ln2_post.w"] = Source(hf + "post_feedforward_layernorm.weight")
    return src


def spec_from_config(cfg: dict):
    return llama_spec(cfg, "gemma2", **gemma2_fields(cfg))


def weight_sources(spec):
    return sandwich_weights(spec, llama_weights(spec))
