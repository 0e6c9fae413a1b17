"""BERT: word + token-type + absolute position embeddings, LayerNorm; post-norm blocks; bidirectional attention.

BertModel has no head (tracer shows the pooled sentence vector); BertForMaskedLM
adds the prediction head: dense, activation, LayerNorm, then the decoder (tied to
the word embeddings unless `tie_word_embeddings: false`) plus a bias. Positions are
0..n-1 whatever the padding, as transformers computes them.
"""

from __future__ import annotations

from tracer.arch.canonical import Source, transposed
from tracer.arch.llama import activation, head_sizes, head_source, own_or_tied
from tracer.arch.spec import Spec
from tracer.checkpoint.config import cfg_bool, cfg_float, cfg_int, cfg_size

IGNORED = ("pooler.*", "bert.pooler.*", "*.position_ids", "*.token_type_ids", "cls.seq_relationship.*")


def head_kind(cfg: dict) -> str:
    """"mlm" when the checkpoint declares a masked-LM class, else "none" (a bare encoder: pooled output)."""
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    return "mlm" if arch.endswith(("ForMaskedLM", "ForPreTraining")) else "none"


def encoder_spec(cfg: dict, family: str, **overrides) -> Spec:
    d = cfg_size(cfg, "hidden_size", family, "d_model")
    heads = cfg_size(cfg, "num_attention_heads", family, "heads")
    fields = dict(
        family=family,
        d_model=d,
        n_layers=cfg_size(cfg, "num_hidden_layers", family, "layers"),
        n_heads=heads,
        n_kv_heads=heads,
        d_head=head_sizes(cfg, family, d, heads, key=None),
        d_ff=cfg_size(cfg, "intermediate_size", family, "d_ff"),
        vocab_size=cfg_size(cfg, "vocab_size", family, "vocab"),
        max_positions=cfg_size(cfg, "max_position_embeddings", family, "positions"),
        norm="layernorm",
        norm_eps=cfg_float(cfg, "layer_norm_eps", family, minimum=0.0, maximum=1.0, default=1e-12),
        norm_placement="post",
        final_norm=False,
        positions="learned",
        position_rule="index",
        token_types=cfg_int(cfg, "type_vocab_size", family, minimum=0, maximum=1024, default=2),
        embed_norm=True,
        causal=False,
        qkv_bias=True,
        o_bias=True,
        mlp="plain",
        activation=activation(cfg, family, "hidden_act", "gelu"),
        mlp_bias=True,
        route="encoder",
        head=head_kind(cfg),
        head_activation=activation(cfg, family, "hidden_act", "gelu"),
        tied_embeddings=cfg_bool(cfg, "tie_word_embeddings", family, default=True),
        head_bias=True,
    )
    fields.update(overrides)
    return Spec(**fields)


def spec_from_config(cfg: dict) -> Spec:
    return encoder_spec(cfg, "bert")


def encoder_weights(spec: Spec, prefix: str) -> dict[str, Source]:
    """BERT-layout encoder weights; `prefix` is "bert." or "roberta." (stripped when the file has no prefix)."""
    e = prefix + "embeddings."
    src = {
        "embed.W_E": Source(e + "word_embeddings.weight"),
        "embed.W_pos": Source(e + "position_embeddings.weight"),
        "embed.ln.w": Source(e + "LayerNorm.weight"),
        "embed.ln.b": Source(e + "LayerNorm.bias"),
    }
    if spec.token_types:
        src["embed.W_type"] = Source(e + "token_type_embeddings.weight")
    for i in range(spec.n_layers):
        hf, p = f"{prefix}encoder.layer.{i}.", f"blocks.{i}."
        for x, theirs in (("q", "query"), ("k", "key"), ("v", "value")):
            src[p + f"attn.W_{x}"] = transposed(hf + f"attention.self.{theirs}.weight")
            src[p + f"attn.b_{x}"] = Source(hf + f"attention.self.{theirs}.bias")
        src[p + "attn.W_o"] = transposed(hf + "attention.output.dense.weight")
        src[p + "attn.b_o"] = Source(hf + "attention.output.dense.bias")
        src[p + "ln1.w"] = Source(hf + "attention.output.LayerNorm.weight")
        src[p + "ln1.b"] = Source(hf + "attention.output.LayerNorm.bias")
        src[p + "mlp.W_in"] = transposed(hf + "intermediate.dense.weight")
        src[p + "mlp.b_in"] = Source(hf + "intermediate.dense.bias")
        src[p + "mlp.W_out"] = transposed(hf + "output.dense.weight")
        src[p + "mlp.b_out"] = Source(hf + "output.dense.bias")
        src[p + "ln2.w"] = Source(hf + "output.LayerNorm.weight")
        src[p + "ln2.b"] = Source(hf + "output.LayerNorm.bias")
    return src


def mlm_head_weights(spec: Spec, prefix: str, dense: str, norm: str, head: str) -> dict[str, Source]:
    """The MLM transform (dense, LayerNorm) and the decoder: its own weight and bias when the checkpoint
    holds them (untied, or stored anyway), else the word embedding and the head's `bias` it is tied to."""
    return {
        "head.W_dense": transposed(dense + ".weight"),
        "head.b_dense": Source(dense + ".bias"),
        "head.ln.w": Source(norm + ".weight"),
        "head.ln.b": Source(norm + ".bias"),
        "unembed.W_U": head_source(spec, prefix + "embeddings.word_embeddings.weight", head + "decoder.weight"),
        "unembed.b_U": own_or_tied(head + "decoder.bias", head + "bias", spec.tied_embeddings),
    }


def weight_sources(spec: Spec) -> dict[str, Source]:
    t = "cls.predictions."
    return encoder_weights(spec, "bert.") | mlm_head_weights(spec, "bert.", t + "transform.dense",
                                                             t + "transform.LayerNorm", t)
