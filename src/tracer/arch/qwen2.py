"""Qwen2: Llama plus q/k/v biases (not on o), and a sliding window on only some layers (see arch.windows)."""

from tracer.arch.llama import IGNORED, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.windows import qwen_windows


def layer_windows(cfg: dict, family: str = "qwen2") -> tuple[int | None, ...]:
    """Per layer: the window size, or None for full attention (`layer_types`, else max_window_layers)."""
    return qwen_windows(cfg, family)


def spec_from_config(cfg: dict):
    return llama_spec(cfg, "qwen2", qkv_bias=True, o_bias=False, sliding_window=layer_windows(cfg))


def weight_sources(spec):
    return llama_weights(spec)
