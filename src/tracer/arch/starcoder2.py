"""StarCoder2: Llama layout with LayerNorm (weights and biases), biases on q/k/v/o, a plain GELU MLP
(c_fc, c_proj) with biases, and a sliding window on every layer."""

from tracer.arch.canonical import Source, transposed
from tracer.arch.llama import llama_spec, llama_weights


def spec_from_config(cfg: dict):
    n_layers = int(cfg.get("num_hidden_layers", 0))
    window = cfg.get("sliding_window")
    bias = bool(cfg.get("use_bias", True))
    return llama_spec(
        cfg, "starcoder2",
        norm="layernorm", norm_eps=float(cfg.get("norm_epsilon", 1e-5)),
        qkv_bias=bias, o_bias=bias, mlp="plain", mlp_bias=bias,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        sliding_window=(int(window) if window else None,) * n_layers,
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
