"""T5 (v1.0, v1.1, flan): encoder-decoder, RMS norm without mean or bias, relative position buckets, no score scaling.

- v1.0: ReLU MLP (`wi`, `wo`); v1.1 / flan: `feed_forward_proj: gated-gelu`,
  GELU(tanh)(wi_0) * wi_1.
- The relative position bias lives in block 0 of each stack and is shared by
  every block; the encoder's buckets look both ways, the decoder's only back.
- With a tied head (v1.0) the decoder output is scaled by d_model**-0.5 before
  the shared embedding reads it; transformers 5 records this as
  `scale_decoder_outputs`, transformers 4 configs as `tie_word_embeddings`.
"""

from __future__ import annotations

from dataclasses import replace

from tracer.arch.canonical import Source, transposed
from tracer.arch.llama import activation
from tracer.arch.spec import RelativeBiasSpec, Spec
from tracer.checkpoint.config import require
from tracer.errors import TracerError

IGNORED = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def _gated(cfg: dict) -> tuple[bool, str]:
    proj = str(cfg.get("feed_forward_proj") or "relu")
    parts = proj.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise TracerError(f"t5: feed_forward_proj {proj!r} is not 'ACT' or 'gated-ACT'")
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]  # transformers' backwards-compatible alias
    return len(parts) == 2, activation({"act": act}, "t5", "act")


def spec_from_config(cfg: dict) -> Spec:
    d = int(require(cfg, "d_model", family="t5"))
    heads = int(require(cfg, "num_heads", family="t5"))
    gated, act = _gated(cfg)
    n_enc = int(require(cfg, "num_layers", family="t5"))
    tied_scale = cfg.get("scale_decoder_outputs", cfg.get("tie_word_embeddings", True) is not False)
    decoder = Spec(
        family="t5",
        d_model=d,
        n_layers=int(cfg.get("num_decoder_layers") or n_enc),
        n_heads=heads,
        n_kv_heads=heads,
        d_head=int(require(cfg, "d_kv", family="t5")),
        d_ff=int(require(cfg, "d_ff", family="t5")),
        vocab_size=int(require(cfg, "vocab_size", family="t5")),
        max_positions=cfg.get("n_positions"),  # advisory (relative positions have no table)
        norm="rmsnorm",
        norm_eps=float(cfg.get("layer_norm_epsilon", 1e-6)),
        positions="relative",
        relative_bias=RelativeBiasSpec(int(cfg.get("relative_attention_num_buckets", 32)),
                                       int(cfg.get("relative_attention_max_distance", 128))),
        causal=True,
        attn_scale=1.0,  # T5 folds 1/sqrt(d_head) into the initialisation of W_q
        mlp="gated" if gated else "plain",
        activation=act,
        route="encoder-decoder",
        tied_embeddings=cfg.get("tie_word_embeddings", True) is not False,
        logit_scale=d**-0.5 if tied_scale else None,
        extras={"decoder_start_token_id": cfg.get("decoder_start_token_id", 0)},
    )
    encoder = replace(decoder, n_layers=n_enc, causal=False, route="encoder", head="none", logit_scale=None, extras={})
    return replace(decoder, encoder=encoder)


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
    src = {"embed.W_E": Source("shared.weight", aliases=("encoder.embed_tokens.weight",))}
    src.update(_stack_weights(spec.encoder, "encoder.", "encoder.", cross=False))
    src.update(_stack_weights(spec, "decoder.", "decoder.", cross=True))
    src["unembed.W_U"] = transposed("shared.weight" if spec.tied_embeddings else "lm_head.weight")
    return src
