"""GPT-NeoX (Pythia): parallel residual, partial rotary, fused query_key_value interleaved per head."""

import numpy as np

from tracer.arch.canonical import Source, transposed
from tracer.arch.llama import activation, head_sizes, head_source, rope_spec
from tracer.arch.spec import Spec
from tracer.checkpoint.config import cfg_bool, cfg_float, cfg_size

# buffers older GPT-NeoX checkpoints store: causal mask, masked_bias, rotary inverse frequencies
IGNORED = ("*.attention.bias", "*.attention.masked_bias", "*.rotary_emb.inv_freq")


def spec_from_config(cfg: dict) -> Spec:
    d = cfg_size(cfg, "hidden_size", "gpt_neox", "d_model")
    heads = cfg_size(cfg, "num_attention_heads", "gpt_neox", "heads")
    d_head = head_sizes(cfg, "gpt_neox", d, heads, key=None)  # GPT-NeoX has no head_dim field
    bias = cfg_bool(cfg, "attention_bias", "gpt_neox", default=True)
    return Spec(
        family="gpt_neox",
        d_model=d,
        n_layers=cfg_size(cfg, "num_hidden_layers", "gpt_neox", "layers"),
        n_heads=heads,
        n_kv_heads=heads,
        d_head=d_head,
        d_ff=cfg_size(cfg, "intermediate_size", "gpt_neox", "d_ff"),
        vocab_size=cfg_size(cfg, "vocab_size", "gpt_neox", "vocab"),
        max_positions=None,
        norm="layernorm",
        norm_eps=cfg_float(cfg, "layer_norm_eps", "gpt_neox", minimum=0.0, maximum=1.0, default=1e-5),
        positions="rotary",
        rope=rope_spec(cfg, d_head, "gpt_neox"),
        qkv_bias=bias,
        o_bias=bias,
        mlp="plain",
        activation=activation(cfg, "gpt_neox", "hidden_act", "gelu"),
        mlp_bias=True,
        residual="parallel" if cfg_bool(cfg, "use_parallel_residual", "gpt_neox", default=True) else "sequential",
        tied_embeddings=cfg_bool(cfg, "tie_word_embeddings", "gpt_neox", default=False),
        extras={"max_position_embeddings": cfg_size(cfg, "max_position_embeddings", "gpt_neox", "positions", default=None)},
    )


def _interleaved(name: str, spec: Spec, which: int, is_bias: bool) -> Source:
    """query_key_value rows are [h0: q k v, h1: q k v, ...]; pick q (0), k (1) or v (2) of every head."""
    h, dh = spec.n_heads, spec.d_head

    def pick(a: np.ndarray) -> np.ndarray:
        if is_bias:
            return a.reshape(h, 3, dh)[:, which].reshape(h * dh)
        return a.reshape(h, 3, dh, spec.d_model)[:, which].reshape(h * dh, spec.d_model).T  # [in, out]

    return Source(name, pick)


def weight_sources(spec: Spec) -> dict[str, Source]:
    src = {"embed.W_E": Source("gpt_neox.embed_in.weight")}
    for i in range(spec.n_layers):
        hf, p = f"gpt_neox.layers.{i}.", f"blocks.{i}."
        for ours, theirs in (("ln1", "input_layernorm"), ("ln2", "post_attention_layernorm")):
            src[p + ours + ".w"] = Source(hf + theirs + ".weight")
            src[p + ours + ".b"] = Source(hf + theirs + ".bias")
        for j, x in enumerate("qkv"):
            src[p + f"attn.W_{x}"] = _interleaved(hf + "attention.query_key_value.weight", spec, j, False)
            if spec.qkv_bias:
                src[p + f"attn.b_{x}"] = _interleaved(hf + "attention.query_key_value.bias", spec, j, True)
        src[p + "attn.W_o"] = transposed(hf + "attention.dense.weight")
        if spec.o_bias:
            src[p + "attn.b_o"] = Source(hf + "attention.dense.bias")
        src[p + "mlp.W_in"] = transposed(hf + "mlp.dense_h_to_4h.weight")
        src[p + "mlp.b_in"] = Source(hf + "mlp.dense_h_to_4h.bias")
        src[p + "mlp.W_out"] = transposed(hf + "mlp.dense_4h_to_h.weight")
        src[p + "mlp.b_out"] = Source(hf + "mlp.dense_4h_to_h.bias")
    src["final_norm.w"] = Source("gpt_neox.final_layer_norm.weight")
    src["final_norm.b"] = Source("gpt_neox.final_layer_norm.bias")
    # transformers 5 names the head lm_head; checkpoints saved before it (Pythia) call it embed_out
    src["unembed.W_U"] = head_source(spec, "gpt_neox.embed_in.weight", "lm_head.weight", ("embed_out.weight",))
    return src
