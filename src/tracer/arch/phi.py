"""Phi-1/Phi-2: parallel attention and MLP reading one shared LayerNorm, partial rotary, biases on
q/k/v and the output projection (`dense`), a plain GELU MLP (fc1, fc2), and an LM head with a bias.
With qk_layernorm, q and k each go through a LayerNorm (with bias) over d_head, per head, before rotary."""

from tracer.arch.canonical import Source, transposed
from tracer.arch.llama import IGNORED, head_source, llama_spec  # noqa: F401  (IGNORED: re-exported)
from tracer.checkpoint.config import cfg_bool, cfg_float


def spec_from_config(cfg: dict):
    qk = "head" if cfg_bool(cfg, "qk_layernorm", "phi", default=False) else "none"  # LayerNorm over d_head, per head
    return llama_spec(
        cfg, "phi",
        norm="layernorm", norm_eps=cfg_float(cfg, "layer_norm_eps", "phi", minimum=0.0, maximum=1.0, default=1e-5),
        qkv_bias=True, o_bias=True, mlp="plain", mlp_bias=True,
        residual="parallel", shared_norm=True, head_bias=True, qk_norm=qk,
    )  # fmt: skip


def weight_sources(spec):
    src = {"embed.W_E": Source("model.embed_tokens.weight")}
    for i in range(spec.n_layers):
        hf, p = f"model.layers.{i}.", f"blocks.{i}."
        src[p + "ln1.w"] = Source(hf + "input_layernorm.weight")
        src[p + "ln1.b"] = Source(hf + "input_layernorm.bias")
        for x, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "dense")):
            src[p + f"attn.W_{x}"] = transposed(hf + f"self_attn.{theirs}.weight")
            src[p + f"attn.b_{x}"] = Source(hf + f"self_attn.{theirs}.bias")
        if spec.qk_norm != "none":  # qk_layernorm: q_layernorm / k_layernorm, LayerNorms with biases
            for x in "qk":
                for wb, theirs in (("w", "weight"), ("b", "bias")):
                    src[p + f"attn.{x}_norm.{wb}"] = Source(hf + f"self_attn.{x}_layernorm.{theirs}")
        for ours, theirs in (("in", "fc1"), ("out", "fc2")):
            src[p + f"mlp.W_{ours}"] = transposed(hf + f"mlp.{theirs}.weight")
            src[p + f"mlp.b_{ours}"] = Source(hf + f"mlp.{theirs}.bias")
    src["final_norm.w"] = Source("model.final_layernorm.weight")
    src["final_norm.b"] = Source("model.final_layernorm.bias")
    src["unembed.W_U"] = head_source(spec, "model.embed_tokens.weight", "lm_head.weight")
    src["unembed.b_U"] = Source("lm_head.bias")
    return src
