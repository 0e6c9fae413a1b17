"""BART: encoder-decoder, learned positions stored after 2 offset rows, embedding LayerNorm, post-norm blocks.

Positions are 0..n-1 whatever the padding (transformers uses arange); the
embedding is scaled by sqrt(d_model) when `scale_embedding` is set; the head is
tied to the shared embedding, plus `final_logits_bias`.

With `tie_word_embeddings: false` transformers ties nothing: the encoder reads
`model.encoder.embed_tokens`, the decoder `model.decoder.embed_tokens`, the head
`lm_head` (and `model.shared` feeds nothing). Tied, each reads its own tensor when
the checkpoint holds one with other values (transformers then declines to tie), else
`model.shared`.
"""

from __future__ import annotations

from dataclasses import replace

from tracer.arch.canonical import Source, transposed
from tracer.arch.llama import activation, head_sizes, head_source, own_or_tied
from tracer.arch.spec import Spec
from tracer.checkpoint.config import cfg_bool, cfg_int, cfg_size

IGNORED = ()  # model.shared feeds nothing when both stacks and the head have their own (canonical.superseded)


def _stack(cfg: dict, side: str, **fields) -> Spec:
    d = cfg_size(cfg, "d_model", "bart", "d_model")
    heads = cfg_size(cfg, f"{side}_attention_heads", "bart", "heads")
    return Spec(
        family="bart",
        d_model=d,
        n_layers=cfg_size(cfg, f"{side}_layers", "bart", "layers"),
        n_heads=heads,
        n_kv_heads=heads,
        d_head=head_sizes(cfg, "bart", d, heads, key=None),
        d_ff=cfg_size(cfg, f"{side}_ffn_dim", "bart", "d_ff"),
        vocab_size=cfg_size(cfg, "vocab_size", "bart", "vocab"),
        max_positions=cfg_size(cfg, "max_position_embeddings", "bart", "positions"),
        norm="layernorm",
        norm_eps=1e-5,  # nn.LayerNorm's default: BART's config has no eps
        norm_placement="post",
        final_norm=False,
        positions="learned",
        position_offset=2,
        position_rule="index",
        embed_norm=True,
        embed_scale=d**0.5 if cfg_bool(cfg, "scale_embedding", "bart", default=False, nullable=True) else None,
        qkv_bias=True,
        o_bias=True,
        mlp="plain",
        activation=activation(cfg, "bart", "activation_function", "gelu"),
        mlp_bias=True,
        **fields,
    )


def spec_from_config(cfg: dict) -> Spec:
    encoder = _stack(cfg, "encoder", causal=False, route="encoder", head="none")
    tied = cfg_bool(cfg, "tie_word_embeddings", "bart", default=True)
    decoder = _stack(cfg, "decoder", causal=True, route="encoder-decoder", tied_embeddings=tied, head_bias=True,
                     extras={"decoder_start_token_id": cfg_int(cfg, "decoder_start_token_id", "bart", minimum=0, default=2, nullable=True)})
    return replace(decoder, encoder=encoder)


def _stack_weights(spec: Spec, side: str, cross: bool) -> dict[str, Source]:
    theirs, ours = f"model.{side}.", f"{side}."
    src = {
        ours + "embed.W_pos": Source(theirs + "embed_positions.weight"),
        ours + "embed.ln.w": Source(theirs + "layernorm_embedding.weight"),
        ours + "embed.ln.b": Source(theirs + "layernorm_embedding.bias"),
    }
    for i in range(spec.n_layers):
        hf, p = f"{theirs}layers.{i}.", f"{ours}blocks.{i}."
        sublayers = [("attn", "self_attn", "ln1", "self_attn_layer_norm")]
        if cross:
            sublayers.append(("cross_attn", "encoder_attn", "ln_cross", "encoder_attn_layer_norm"))
        for part, module, norm, norm_module in sublayers:
            for x, proj in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj")):
                src[p + f"{part}.W_{x}"] = transposed(hf + f"{module}.{proj}.weight")
                src[p + f"{part}.b_{x}"] = Source(hf + f"{module}.{proj}.bias")
            src[p + norm + ".w"] = Source(hf + norm_module + ".weight")
            src[p + norm + ".b"] = Source(hf + norm_module + ".bias")
        src[p + "ln2.w"] = Source(hf + "final_layer_norm.weight")
        src[p + "ln2.b"] = Source(hf + "final_layer_norm.bias")
        src[p + "mlp.W_in"] = transposed(hf + "fc1.weight")
        src[p + "mlp.b_in"] = Source(hf + "fc1.bias")
        src[p + "mlp.W_out"] = transposed(hf + "fc2.weight")
        src[p + "mlp.b_out"] = Source(hf + "fc2.bias")
    return src


def weight_sources(spec: Spec) -> dict[str, Source]:
    tied, shared = spec.tied_embeddings, "model.shared.weight"
    src = {"embed.W_E": own_or_tied("model.encoder.embed_tokens.weight", shared, tied),
           "decoder.embed.W_E": own_or_tied("model.decoder.embed_tokens.weight", shared, tied)}
    src.update(_stack_weights(spec.encoder, "encoder", cross=False))
    src.update(_stack_weights(spec, "decoder", cross=True))
    src["unembed.W_U"] = head_source(spec, shared, "lm_head.weight")
    src["unembed.b_U"] = Source("final_logits_bias", lambda a: a.reshape(-1))
    return src
