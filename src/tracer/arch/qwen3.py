"""Qwen3: Llama plus q_norm / k_norm (RMSNorm over each head's d_head, before rotary), no q/k/v biases."""

from tracer.arch.canonical import Source
from tracer.arch.llama import IGNORED, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.windows import qwen_windows


def spec_from_config(cfg: dict):
    return llama_spec(cfg, "qwen3", qk_norm="head", sliding_window=qwen_windows(cfg, "qwen3"))


def qk_norm_weights(spec, src: dict, prefix: str = "model") -> dict:
    """Add each block's q_norm / k_norm weights (`self_attn.q_norm.weight`) to a Llama-layout source map."""
    for i in range(spec.n_layers):
        for x in "qk":
            src[f"blocks.{i}.attn.{x}_norm.w"] = Source(f"{prefix}.layers.{i}.self_attn.{x}_norm.weight")
    return src


def weight_sources(spec):
    return qk_norm_weights(spec, llama_weights(spec))
