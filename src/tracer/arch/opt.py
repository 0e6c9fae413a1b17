"""OPT: learned positions stored with an offset of 2, ReLU MLP, pre- or post-norm (`do_layer_norm_before`),
and in opt-350m narrower embeddings projected in and out (`word_embed_proj_dim`)."""

from tracer.arch.canonical import Source, transposed
from tracer.arch.llama import activation, head_source
from tracer.arch.spec import Spec
from tracer.checkpoint.config import cfg_bool, cfg_size
from tracer.errors import TracerError


def spec_from_config(cfg: dict) -> Spec:
    d = cfg_size(cfg, "hidden_size", "opt", "d_model")
    heads = cfg_size(cfg, "num_attention_heads", "opt", "heads")
    if d % heads:
        raise TracerError(f"config.json (opt): hidden_size {d} is not a multiple of num_attention_heads {heads}")
    proj = cfg_size(cfg, "word_embed_proj_dim", "opt", "d_model", default=None, nullable=True)
    d_embed = proj if proj not in (None, d) else None  # opt-350m: embeddings projected in and out
    if cfg_bool(cfg, "layer_norm_elementwise_affine", "opt", default=True) is False:
        raise TracerError("opt: layer_norm_elementwise_affine=false is not supported yet")
    pre = cfg_bool(cfg, "do_layer_norm_before", "opt", default=True)
    bias = cfg_bool(cfg, "enable_bias", "opt", default=True)
    return Spec(
        family="opt",
        d_model=d,
        n_layers=cfg_size(cfg, "num_hidden_layers", "opt", "layers"),
        n_heads=heads,
        n_kv_heads=heads,
        d_head=d // heads,
        d_ff=cfg_size(cfg, "ffn_dim", "opt", "d_ff"),
        vocab_size=cfg_size(cfg, "vocab_size", "opt", "vocab"),
        max_positions=cfg_size(cfg, "max_position_embeddings", "opt", "positions"),
        norm="layernorm",
        norm_eps=1e-5,
        norm_placement="pre" if pre else "post",
        final_norm=pre and not cfg_bool(cfg, "_remove_final_layer_norm", "opt", default=False),
        positions="learned",
        position_offset=2,
        rope=None,
        qkv_bias=bias,
        o_bias=bias,
        mlp="plain",
        activation=activation(cfg, "opt", "activation_function", "relu"),
        mlp_bias=bias,
        tied_embeddings=cfg_bool(cfg, "tie_word_embeddings", "opt", default=True),
        d_embed=d_embed,
    )


def weight_sources(spec: Spec) -> dict[str, Source]:
    src = {
        "embed.W_E": Source("model.decoder.embed_tokens.weight"),
        "embed.W_pos": Source("model.decoder.embed_positions.weight"),
    }
    for i in range(spec.n_layers):
        hf, p = f"model.decoder.layers.{i}.", f"blocks.{i}."
        for ours, theirs in (("ln1", "self_attn_layer_norm"), ("ln2", "final_layer_norm")):
            src[p + ours + ".w"] = Source(hf + theirs + ".weight")
            src[p + ours + ".b"] = Source(hf + theirs + ".bias")
        for x, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj")):
            src[p + f"attn.W_{x}"] = transposed(hf + f"self_attn.{theirs}.weight")
            if spec.qkv_bias:
                src[p + f"attn.b_{x}"] = Source(hf + f"self_attn.{theirs}.bias")
        src[p + "mlp.W_in"] = transposed(hf + "fc1.weight")
        src[p + "mlp.W_out"] = transposed(hf + "fc2.weight")
        if spec.mlp_bias:
            src[p + "mlp.b_in"] = Source(hf + "fc1.bias")
            src[p + "mlp.b_out"] = Source(hf + "fc2.bias")
    if spec.final_norm:
        src["final_norm.w"] = Source("model.decoder.final_layer_norm.weight")
        src["final_norm.b"] = Source("model.decoder.final_layer_norm.bias")
    if spec.d_embed is not None:  # nn.Linear weights [out, in] -> [in, out]
        src["project_in.W"] = transposed("model.decoder.project_in.weight")
        src["project_out.W"] = transposed("model.decoder.project_out.weight")
    src["unembed.W_U"] = head_source(spec, "model.decoder.embed_tokens.weight", "lm_head.weight")
    return src
