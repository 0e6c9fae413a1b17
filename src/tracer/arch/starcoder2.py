"""StarCoder2: Llama layout with LayerNorm (weights and biases), biases on q/k/v/o, a plain GELU MLP
(c_fc, c_proj) with biases, and a sliding window on every layer."""

from tracer.arch.canonical import Source, transposed
from tracer.arch.llama import IGNORED, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.windows import every_layer
from tracer.checkpoint.config import cfg_bool, cfg_float


def spec_from_config(cfg: dict):
    family = "starcoder2"
    bias = cfg_bool(cfg, "use_bias", family, default=True)
    return llama_spec(
        cfg, family,
        norm="layernorm", norm_eps=cfg_float(cfg, "norm_epsilon", family, minimum=0.0, maximum=1.0, default=1e-5),
        qkv_bias=bias, o_bias=bias, mlp="plain", mlp_bias=bias,
        tied_embeddings=cfg_bool(cfg, "tie_word_embeddings", family, default=True),
        sliding_window=every_layer(cfg, family),
    )  # fmt: skip


def weight_sources(spec):
    src = llama_weights(spec)
    for i in range(spec.n_layers):
        hf, p = f"model.layers.{i}.", f"blocks.{i}."
        src[p + "ln1.b"] = Source(hf + "input_layernorm.bias")
        src[p + "ln2.b"] = Source(hf + "post_attention_layernorm.bias")
        del src[p + "mlp.W_up"]
        src[p + "mlp.W_in"] = transposed(hf + "mlp.c_fc.weight")
        src[p + "mlp.W_out"] = transposed(hf + "mlp.c_proj.weight")
        if spec.mlp_bias:
            src[p + "mlp.b_in"] = Source(hf + "mlp.c_fc.bias")
            src[p + "mlp.b_out"] = Source(hf + "mlp.c_proj.bias")
    src["final_norm.b"] = Source("model.norm.bias")
    return src
