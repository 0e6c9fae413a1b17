"""GPT-2: learned positions, LayerNorm, Conv1D weights stored [in, out], fused c_attn = [q; k; v], tied head."""

from tracer.arch.canonical import Source
from tracer.arch.llama import activation, head_source
from tracer.arch.spec import Spec
from tracer.checkpoint.config import cfg_bool, cfg_float, cfg_size
from tracer.errors import TracerError

# causal-mask buffers older GPT-2 checkpoints store as float tensors
IGNORED = ("*.attn.bias", "*.attn.masked_bias")


def spec_from_config(cfg: dict) -> Spec:
    d = cfg_size(cfg, ("n_embd", "hidden_size"), "gpt2", "d_model")
    heads = cfg_size(cfg, ("n_head", "num_attention_heads"), "gpt2", "heads")
    if d % heads:
        raise TracerError(f"config.json (gpt2): n_embd {d} is not a multiple of n_head {heads}")
    if cfg.get("scale_attn_by_inverse_layer_idx") or cfg.get("reorder_and_upcast_attn"):
        raise TracerError("gpt2: scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not supported")
    return Spec(
        family="gpt2",
        d_model=d,
        n_layers=cfg_size(cfg, ("n_layer", "num_hidden_layers"), "gpt2", "layers"),
        n_heads=heads,
        n_kv_heads=heads,
        d_head=d // heads,
        d_ff=cfg_size(cfg, "n_inner", "gpt2", "d_ff", default=4 * d, nullable=True),
        vocab_size=cfg_size(cfg, "vocab_size", "gpt2", "vocab"),
        max_positions=cfg_size(cfg, ("n_positions", "max_position_embeddings"), "gpt2", "positions"),
        norm="layernorm",
        norm_eps=cfg_float(cfg, "layer_norm_epsilon", "gpt2", minimum=0.0, maximum=1.0, default=1e-5),
        positions="learned",
        rope=None,
        qkv_bias=True,
        o_bias=True,
        attn_scale=None if cfg_bool(cfg, "scale_attn_weights", "gpt2", default=True) else 1.0,
        mlp="plain",
        activation=activation(cfg, "gpt2", "activation_function", "gelu_new"),
        mlp_bias=True,
        tied_embeddings=cfg_bool(cfg, "tie_word_embeddings", "gpt2", default=True),
    )


def _columns(name: str, start: int, stop: int) -> Source:
    return Source(name, lambda a: a[..., start:stop])


def weight_sources(spec: Spec) -> dict[str, Source]:
    d = spec.d_model
    src = {"embed.W_E": Source("transformer.wte.weight"), "embed.W_pos": Source("transformer.wpe.weight")}
    for i in range(spec.n_layers):
        hf, p = f"transformer.h.{i}.", f"blocks.{i}."
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            src[p + ours + ".w"] = Source(hf + theirs + ".weight")
            src[p + ours + ".b"] = Source(hf + theirs + ".bias")
        for j, x in enumerate("qkv"):  # Conv1D [in, 3*out]: q, k, v side by side on the output axis
            src[p + f"attn.W_{x}"] = _columns(hf + "attn.c_attn.weight", j * d, (j + 1) * d)
            src[p + f"attn.b_{x}"] = _columns(hf + "attn.c_attn.bias", j * d, (j + 1) * d)
        src[p + "attn.W_o"] = Source(hf + "attn.c_proj.weight")
        src[p + "attn.b_o"] = Source(hf + "attn.c_proj.bias")
        src[p + "mlp.W_in"] = Source(hf + "mlp.c_fc.weight")
        src[p + "mlp.b_in"] = Source(hf + "mlp.c_fc.bias")
        src[p + "mlp.W_out"] = Source(hf + "mlp.c_proj.weight")
        src[p + "mlp.b_out"] = Source(hf + "mlp.c_proj.bias")
    src["final_norm.w"] = Source("transformer.ln_f.weight")
    src["final_norm.b"] = Source("transformer.ln_f.bias")
    src["unembed.W_U"] = head_source(spec, "transformer.wte.weight", "lm_head.weight")
    return src
