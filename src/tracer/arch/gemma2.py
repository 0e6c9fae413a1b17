"""Gemma-2: Gemma (x * (1 + w) RMSNorm, sqrt(d_model) embedding scale, GeGLU, tied head) with norms before
and after each sublayer, attention scores and final logits soft-capped (tanh(s / cap) * cap), queries scaled
by query_pre_attn_scalar^-0.5, and sliding-window layers alternating with global ones (`layer_types`)."""

import math

from tracer.arch.canonical import Source
from tracer.arch.gemma import bidirectional
from tracer.arch.llama import IGNORED, activation, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.windows import DEFAULT_WINDOW, by_layer_types, window_size
from tracer.checkpoint.config import cfg_bool, cfg_float, cfg_size


def layer_windows(cfg: dict, default_types, family: str) -> tuple[int | None, ...]:
    """Per layer: the window for "sliding_attention" layers, None for "full_attention"."""
    return by_layer_types(cfg, family, window_size(cfg, family, DEFAULT_WINDOW), default_types)


def _alternating(n_layers: int) -> list[str]:
    return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]


def _softcap(cfg: dict, key: str, family: str, absent: float | None) -> float | None:
    """A soft cap: `absent` (the class default) when the field is missing, none when null."""
    if key not in cfg:
        return absent
    return cfg_float(cfg, key, family, above=0.0, default=None, nullable=True)


def gemma2_fields(cfg: dict, family: str, default_types=_alternating, caps: tuple = (50.0, 30.0)) -> dict:
    """The Spec fields Gemma-2 and Gemma-3 share (`caps`: the class's attention and final soft caps)."""
    d_model = cfg_size(cfg, "hidden_size", family, "d_model")
    scalar = cfg_float(cfg, "query_pre_attn_scalar", family, above=0.0, default=256.0)
    return dict(
        norm_offset=1.0,
        norm_placement="sandwich",
        embed_scale=math.sqrt(d_model),
        tied_embeddings=cfg_bool(cfg, "tie_word_embeddings", family, default=True),
        causal=not (cfg_bool(cfg, "use_bidirectional_attention", family, default=False, nullable=True)
                    if family == "gemma3_text" else bidirectional(cfg, family)),  # gemma3 masks both ways
        attn_scale=scalar ** -0.5,
        attn_softcap=_softcap(cfg, "attn_logit_softcapping", family, caps[0]),
        logit_softcap=_softcap(cfg, "final_logit_softcapping", family, caps[1]),
        # gemma2/3 read hidden_activation (a hidden_act beside it is ignored)
        activation=activation(cfg, family, "hidden_activation", "gelu_pytorch_tanh"),
        sliding_window=layer_windows(cfg, default_types, family),
    )


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
    return llama_spec(cfg, "gemma2", **gemma2_fields(cfg, "gemma2"))


def weight_sources(spec):
    return sandwich_weights(spec, llama_weights(spec))
