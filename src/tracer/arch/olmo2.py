"""OLMo-2: Llama with its norms moved after each sublayer (x + norm(attn(x)), no norm before), and q/k
RMSNorm over the whole projection (all heads together) before the head split and rotary."""

from tracer.arch.canonical import Source
from tracer.arch.llama import IGNORED, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.qwen3 import qk_norm_weights


def spec_from_config(cfg: dict):
    return llama_spec(cfg, "olmo2", norm_placement="after", qk_norm="full")


def weight_sources(spec):
    src = qk_norm_weights(spec, llama_weights(spec))
    for i in range(spec.n_layers):
        hf, p = f"model.layers.{i}.", f"blocks.{i}."
        del src[p + "ln1.w"], src[p + "ln2.w"]
        src[p + "ln1_post.w"] = Source(hf + "post_attention_layernorm.weight")
        src[p + "ln2_post.w"] = Source(hf + "post_feedforward_layernorm.weight")
    return src
