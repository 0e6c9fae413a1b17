"""Qwen2: Llama plus q/k/v biases (not on o), and a sliding window on only some layers."""

from tracer.arch.llama import IGNORED, llama_spec, llama_weights, sliding_window
from tracer.checkpoint.config import cfg_bool, cfg_int, cfg_list, cfg_size

LAYER_TYPES = ("full_attention", "sliding_attention")


def layer_windows(cfg: dict) -> tuple[int | None, ...]:
    """Per layer: the window size, or None for full attention (`layer_types`, else max_window_layers)."""
    n_layers = cfg_size(cfg, "num_hidden_layers", "qwen2", "layers")
    window = sliding_window(cfg, "qwen2") if cfg_bool(cfg, "use_sliding_window", "qwen2", default=False) else None
    types = cfg_list(cfg, "layer_types", "qwen2", length=n_layers, choices=LAYER_TYPES, default=None)
    if not types:
        start = cfg_int(cfg, "max_window_layers", "qwen2", minimum=0, default=n_layers)
        types = ["sliding_attention" if window and i >= start else "full_attention" for i in range(n_layers)]
    return tuple(window if t == "sliding_attention" and window else None for t in types)


def spec_from_config(cfg: dict):
    return llama_spec(cfg, "qwen2", qkv_bias=True, o_bias=False, sliding_window=layer_windows(cfg))


def weight_sources(spec):
    return llama_weights(spec)
