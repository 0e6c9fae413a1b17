"""BERT: word + token-type + absolute position embeddings, LayerNorm; post-norm blocks; bidirectional attention.

BertModel has no head (tracer shows the pooled sentence vector); BertForMaskedLM
adds the prediction head: dense, activation, LayerNorm, then the decoder tied to
the word embeddings plus a bias. Positions are 0..n-1 whatever the padding, as
transformers computes them.
"""

from __future__ import annotations

from tracer.arch.canonical import Source, transposed
from tracer.arch.llama import activation
from tracer.arch.spec import Spec
from tracer.checkpoint.config import require

IGNORED = ("pooler.*", "bert.pooler.*", "*.position_ids", "*.token_type_ids", "cls.seq_relationship.*")


def head_kind(cfg: dict) -> str:
    """"mlm" when the checkpoint declares a masked-LM class, else "none" (a bare encoder: pooled output)."""
    arch = (cfg.get("architectures") or [""])[0] or ""
    return "mlm" if arch.endswith("ForMaskedLM") or arch.endswith("ForPreTraining") else "none"


def encoder_spec(cfg: dict, family: str, **overrides) -> Spec:
    d = int(require(cfg, "hidden_size", family=family))
    heads = int(require(cfg, "num_attention_heads", family=family))
    fields = dict(
        family=family,
        d_model=d,
        n_layers=int(require(cfg, "num_hidden_layers", family=family)),
        n_heads=heads,
        n_kv_heads=heads,
        d_head=d // heads,
        d_ff=int(require(cfg, "intermediate_size", family=family)),
        vocab_size=int(require(cfg, "vocab_size", family=family)),
        max_positions=int(require(cfg, "max_position_embeddings", family=family)),
        norm="layernorm",
        norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
        norm_placement="post",
        final_norm=False,
        positions="learned",
        position_rule="index",
        token_types=int(cfg.get("type_vocab_size", 2) or 0),
        embed_norm=True,
        causal=False,
        qkv_bias=True,
        o_bias=True,
        mlp="plain",
        activation=activation(cfg, family, "hidden_act"),
        mlp_bias=True,
        route="encoder",
        head=head_kind(cfg),
        head_activation=activation(cfg, family, "hidden_act"),
        tied_embeddings=True,
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
    src["unembed.W_U"] = transposed(e + "word_embeddings.weight")  # the MLM decoder is tied to the word embeddings
    return src


def weight_sources(spec: Spec) -> dict[str, Source]:
    src = encoder_weights(spec, "bert.")
    t = "cls.predictions."
    src.update({
        "head.W_dense": transposed(t + "transform.dense.weight"),
        "head.b_dense": Source(t + "transform.dense.bias"),
        "head.ln.w": Source(t + "transform.LayerNorm.weight"),
        "head.ln.b": Source(t + "transform.LayerNorm.bias"),
        "unembed.b_U": Source(t + "bias", aliases=(t + "decoder.bias",)),
    })
    return src
