"""T5 (v1.0, v1.1, flan): encoder-decoder, RMS norm without mean or bias, relative position buckets, no score scaling.

- v1.0: ReLU MLP (`wi`, `wo`); v1.1 / flan: `feed_forward_proj: gated-gelu`,
  GELU(tanh)(wi_0) * wi_1.
- The relative position bias lives in block 0 of each stack and is shared by
  every block; the encoder's buckets look both ways, the decoder's only back.
- With a tied head (v1.0) the decoder output is scaled by d_model**-0.5 before
  the shared embedding reads it; transformers 5 records this as
  `scale_decoder_outputs`, transformers 4 configs as `tie_word_embeddings`.
- Embeddings and head: transformers 5.24 ties encoder, decoder and head to `shared`
  whatever the config says, but not a tensor the checkpoint holds with other values
  (v1.1's `lm_head`, or separate `encoder.embed_tokens` / `decoder.embed_tokens`):
  each reads its own tensor when the checkpoint has one, else `shared`.
"""

from __future__ import annotations

from dataclasses import replace

from tracer.arch.canonical import Source, transposed
from tracer.arch.llama import activation, own_or_tied
from tracer.arch.spec import RelativeBiasSpec, Spec
from tracer.checkpoint.config import cfg_bool, cfg_float, cfg_int, cfg_size
from tracer.errors import TracerError

IGNORED = ()  # shared.weight feeds whichever of encoder, decoder and head has no tensor of its own


def _gated(cfg: dict) -> tuple[bool, str]:
    proj = cfg.get("feed_forward_proj", "relu")  # a null is refused below, as transformers does
    if not isinstance(proj, str):
        raise TracerError(f"config.json (t5): feed_forward_proj is {proj!r}, expected a string such as 'relu' or 'gated-gelu'")
    parts = proj.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise TracerError(f"t5: feed_forward_proj {proj!r} is not 'ACT' or 'gated-ACT'")
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]  # transformers' backwards-compatible alias
    return len(parts) == 2, activation({"act": act}, "t5", "act")


def spec_from_config(cfg: dict) -> Spec:
    d = cfg_size(cfg, "d_model", "t5", "d_model")
    heads = cfg_size(cfg, "num_heads", "t5", "heads")
    gated, act = _gated(cfg)
    n_enc = cfg_size(cfg, "num_layers", "t5", "layers")
    tied = cfg_bool(cfg, "tie_word_embeddings", "t5", default=True, nullable=True)
    tied_scale = cfg_bool(cfg, "scale_decoder_outputs", "t5", default=tied, nullable=True)
    decoder = Spec(
        family="t5",
        d_model=d,
        n_layers=cfg_size(cfg, "num_decoder_layers", "t5", "layers", default=n_enc, nullable=True),
        n_heads=heads,
        n_kv_heads=heads,
        d_head=cfg_size(cfg, "d_kv", "t5", "d_model"),
        d_ff=cfg_size(cfg, "d_ff", "t5", "d_ff"),
        vocab_size=cfg_size(cfg, "vocab_size", "t5", "vocab"),
        max_positions=cfg_size(cfg, "n_positions", "t5", "positions", default=None, nullable=True),  # advisory: no table
        norm="rmsnorm",
        norm_eps=cfg_float(cfg, "layer_norm_epsilon", "t5", minimum=0.0, maximum=1.0, default=1e-6),
        positions="relative",
        relative_bias=_relative_bias(cfg),
        causal=True,
        attn_scale=1.0,  # T5 folds 1/sqrt(d_head) into the initialisation of W_q
        mlp="gated" if gated else "plain",
        activation=act,
        route="encoder-decoder",
        tied_embeddings=tied,
        logit_scale=d**-0.5 if tied_scale else None,
        extras={"decoder_start_token_id": cfg_int(cfg, "decoder_start_token_id", "t5", minimum=0, default=0, nullable=True)},
    )
    encoder = replace(decoder, n_layers=n_enc, causal=False, route="encoder", head="none", logit_scale=None, extras={})
    return replace(decoder, encoder=encoder)


def _relative_bias(cfg: dict) -> RelativeBiasSpec:
    """Buckets (at least 4: the encoder halves them, then half of each half is exact) and the distance cap,
    which must exceed the decoder's exact distances (buckets // 2): transformers divides by
    log(max_distance / exact) and indexes past the table when it does not."""
    buckets = cfg_int(cfg, "relative_attention_num_buckets", "t5", minimum=4, maximum=1 << 16, default=32)
    distance = cfg_int(cfg, "relative_attention_max_distance", "t5", minimum=2, maximum=1 << 24, default=128)
    if distance <= buckets // 2:
        raise TracerError(f"config.json (t5): relative_attention_max_distance {distance} must exceed the "
                          f"{buckets // 2} exact distances the decoder's {buckets} buckets keep")
    return RelativeBiasSpec(buckets, distance)


def _stack_weights(spec: Spec, theirs: str, ours: str, cross: bool) -> dict[str, Source]:
    src = {ours + "rel_bias.W": Source(theirs + "block.0.layer.0.SelfAttention.relative_attention_bias.weight")}
    for i in range(spec.n_layers):
        hf, p = f"{theirs}block.{i}.layer.", f"{ours}blocks.{i}."
        sublayers = [("attn", "0.SelfAttention", "ln1", "0.layer_norm")]
        if cross:
            sublayers.append(("cross_attn", "1.EncDecAttention", "ln_cross", "1.layer_norm"))
        ff = "2" if cross else "1"
        for part, module, norm, norm_module in sublayers:
            for x in "qkvo":
                src[p + f"{part}.W_{x}"] = transposed(hf + f"{module}.{x}.weight")
            src[p + norm + ".w"] = Source(hf + norm_module + ".weight")
        src[p + "ln2.w"] = Source(hf + f"{ff}.layer_norm.weight")
        if spec.mlp == "gated":
            src[p + "mlp.W_in"] = transposed(hf + f"{ff}.DenseReluDense.wi_0.weight")
            src[p + "mlp.W_up"] = transposed(hf + f"{ff}.DenseReluDense.wi_1.weight")
        else:
            src[p + "mlp.W_in"] = transposed(hf + f"{ff}.DenseReluDense.wi.weight")
        src[p + "mlp.W_out"] = transposed(hf + f"{ff}.DenseReluDense.wo.weight")
    src[ours + "final_norm.w"] = Source(theirs + "final_layer_norm.weight")
    return src


def weight_sources(spec: Spec) -> dict[str, Source]:
    src = {"embed.W_E": own_or_tied("encoder.embed_tokens.weight", "shared.weight", True),
           "decoder.embed.W_E": own_or_tied("decoder.embed_tokens.weight", "shared.weight", True)}
    src.update(_stack_weights(spec.encoder, "encoder.", "encoder.", cross=False))
    src.update(_stack_weights(spec, "decoder.", "decoder.", cross=True))
    src["unembed.W_U"] = own_or_tied("lm_head.weight", "shared.weight", True, lambda a: a.T)  # tied in 5.24 always
    return src
