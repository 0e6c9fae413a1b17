"""Gemma-3 (text): Gemma-2's block plus q/k RMSNorm per head (x * (1 + w)) before rotary, and a separate
rotary for the sliding-window layers (`rope_parameters.sliding_attention`; transformers 4: rope_local_base_freq)."""

from tracer.arch.gemma2 import gemma2_fields, sandwich_weights
from tracer.arch.llama import IGNORED, head_sizes, llama_spec, llama_weights, rope_spec  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.qwen3 import qk_norm_weights
from tracer.checkpoint.config import cfg_float, cfg_int, cfg_object, cfg_size
from tracer.errors import TracerError

FAMILY = "gemma3_text"


def _pattern(cfg: dict):
    """transformers' default layer_types: every `sliding_window_pattern`-th layer (default 6) global."""
    every = cfg_int(cfg, "sliding_window_pattern", FAMILY, minimum=1, maximum=1 << 16, default=6, nullable=True)
    return lambda n_layers: ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n_layers)]


def rope_by_layer_type(cfg: dict) -> tuple[dict, dict]:
    """(global, local) rope parameters from either layout: nested by layer type (transformers 5), or
    rope_theta + rope_scaling for the global layers and rope_local_base_freq for the local ones (4.x)."""
    params = cfg_object(cfg, "rope_parameters", FAMILY)
    if "full_attention" in params or "sliding_attention" in params:
        full = cfg_object(params, "full_attention", FAMILY)
        local = cfg_object(params, "sliding_attention", FAMILY)
    else:
        full = cfg_object(cfg, "rope_scaling", FAMILY)
        if "type" in full and "rope_type" not in full:
            full["rope_type"] = full.pop("type")
        local = {}
    full.setdefault("rope_type", "default")
    if "rope_theta" not in full:
        full["rope_theta"] = cfg_float(cfg, "rope_theta", FAMILY, above=0.0, default=1_000_000.0)
    local.setdefault("rope_type", "default")
    if "rope_theta" not in local:
        local["rope_theta"] = cfg_float(cfg, "rope_local_base_freq", FAMILY, above=0.0, default=10_000.0)
    return full, local


def spec_from_config(cfg: dict):
    d_model = cfg_size(cfg, "hidden_size", FAMILY, "d_model")
    d_head = head_sizes(cfg, FAMILY, d_model, cfg_size(cfg, "num_attention_heads", FAMILY, "heads"))
    full, local = rope_by_layer_type(cfg)
    fields = gemma2_fields(cfg, FAMILY, _pattern(cfg), caps=(None, None))
    if not fields["causal"] and any(w is not None for w in fields["sliding_window"]):
        # transformers: |i - j| <= sliding_window // 2 on both sides; tracer's windows look back only
        raise TracerError("gemma3_text: use_bidirectional_attention with sliding-window layers (a window on both "
                          "sides of the query) is not supported", hint="mark every layer full_attention in layer_types")
    # transformers (5.24) reads attn_logit_softcapping into the attention module but never passes it on:
    # Gemma-3 scores are not capped, whatever the config says
    fields.update(attn_softcap=None, qk_norm="head", rope=rope_spec(cfg, d_head, FAMILY, full),
                  rope_local=rope_spec(cfg, d_head, FAMILY, local))
    return llama_spec(cfg, FAMILY, **fields)


def weight_sources(spec):
    return qk_norm_weights(spec, sandwich_weights(spec, llama_weights(spec)))
