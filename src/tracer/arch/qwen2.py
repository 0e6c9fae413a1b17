"""Qwen2: Llama plus q/k/v biases (not on o), and a sliding window on only some layers."""

from tracer.arch.llama import llama_spec, llama_weights


def layer_windows(cfg: dict) -> tuple[int | None, ...]:
    """Per layer: the window size, or None for full attention (`layer_types`, else max_window_layers)."""
    n_layers = int(cfg.get("num_hidden_layers", 0))
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", False) else None
    types = cfg.get("layer_types")
    if not types:
        start = int(cfg.get("max_window_layers", n_layers))
        types = ["sliding_attention" if window and i >= start else "full_attention" for i in range(n_layers)]
    return tuple(int(window) if t == "sliding_attention" and window else None for t in types)


def spec_from_config(cfg: dict):
    return llama_spec(cfg, "qwen2", qkv_bias=True, o_bias=False, sliding_window=layer_windows(cfg))


def weight_sources(spec):
    return llama_weights(spec)
