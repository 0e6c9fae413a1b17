"""Parameters by group, from the Spec alone: embeddings, attention, MLP, norms, head (a tied head once).

An encoder-decoder model counts both stacks; its token embedding is shared, so it is counted once.
"""

from __future__ import annotations

from tracer.arch.canonical import block_norms
from tracer.arch.spec import Spec

GROUPS = ("embeddings", "attention", "mlp", "norms", "head")


def stacks(spec: Spec) -> list[Spec]:
    return [spec.encoder, spec] if spec.encoder is not None else [spec]


def position_parameters(spec: Spec) -> int:
    """One stack's learned positions (OPT and BART store `position_offset` extra rows), segment table and
    relative-bias table."""
    n = 0
    if spec.positions == "learned":
        n += (spec.max_positions + spec.position_offset) * spec.d_model
    n += spec.token_types * spec.d_model
    if spec.relative_bias is not None:
        n += spec.relative_bias.num_buckets * spec.n_heads
    return n


def embedding_parameters(spec: Spec) -> int:
    """Token embeddings (d_embed wide in OPT-350m, with its project_in and project_out; an untied
    encoder-decoder's decoder has a table of its own), positions, segments."""
    width = spec.d_embed or spec.d_model
    projections = 2 * width * spec.d_model if spec.d_embed is not None else 0
    tables = 2 if spec.encoder is not None and not spec.tied_embeddings else 1
    return tables * spec.vocab_size * width + projections + sum(position_parameters(s) for s in stacks(spec))


def attention_parameters(spec: Spec) -> int:
    """One layer's attention projections: W_q, W_k, W_v, W_o and their biases."""
    q, kv, d = spec.n_heads * spec.d_head, spec.n_kv_heads * spec.d_head, spec.d_model
    weights = d * q + 2 * d * kv + q * d
    return weights + (q + 2 * kv if spec.qkv_bias else 0) + (d if spec.o_bias else 0)


def mlp_parameters(spec: Spec) -> int:
    """One layer: gate (and up when gated) and down, with their biases."""
    d, f = spec.d_model, spec.d_ff
    ins = 2 if spec.mlp == "gated" else 1
    return (ins + 1) * d * f + ((ins * f + d) if spec.mlp_bias else 0)


def layer_mlp_parameters(spec: Spec, layer: int) -> int:
    """One layer's MLP, or its router, every expert and any shared expert in a mixture-of-experts layer."""
    if spec.moe is None or not spec.moe.on(layer):
        return mlp_parameters(spec)
    m = spec.moe
    shared = 3 * spec.d_model * m.d_shared + spec.d_model if m.d_shared else 0  # qwen2_moe: shared expert, its gate
    return spec.d_model * m.n_experts + m.n_experts * 3 * spec.d_model * m.d_expert + shared  # router; gated experts


def norm_size(spec: Spec) -> int:
    return spec.d_model * (2 if spec.norm == "layernorm" else 1)


def qk_norm_parameters(spec: Spec) -> int:
    """One layer's q/k norms: d_head wide each (per head, shared by the heads) or the whole projection."""
    if spec.qk_norm == "none":
        return 0
    widths = 2 * spec.d_head if spec.qk_norm == "head" else (spec.n_heads + spec.n_kv_heads) * spec.d_head
    return widths * (2 if spec.norm == "layernorm" else 1)


def norm_parameters(spec: Spec) -> int:
    """Per stack: the norms of each layer (two; three with cross-attention; four around gemma2's sublayers;
    one shared in phi), its q/k norms, the final norm, an embedding norm."""
    total = 0
    for s in stacks(spec):
        per_layer = len(block_norms(s))
        total += (per_layer * s.n_layers + s.final_norm + s.embed_norm) * norm_size(s)
        total += s.n_layers * qk_norm_parameters(s)
    return total


def head_parameters(spec: Spec) -> int:
    """The unembedding (a head tied to the embedding is counted there, once), its bias, and BERT's
    transform (dense, LayerNorm) before it; nothing for a pooled output."""
    if spec.head == "none":
        return 0
    width = spec.d_embed or spec.d_model
    n = (0 if spec.tied_embeddings else width * spec.vocab_size) + (spec.vocab_size if spec.head_bias else 0)
    if spec.head == "mlm":
        n += spec.d_model * spec.d_model + spec.d_model + 2 * spec.d_model
    return n


def parameter_groups(spec: Spec) -> dict[str, int]:
    layers = [(s, s.n_layers) for s in stacks(spec)]
    return {
        "embeddings": embedding_parameters(spec),
        "attention": sum(n * attention_parameters(s) * (2 if s.cross_attention else 1) for s, n in layers),
        "mlp": sum(layer_mlp_parameters(s, i) for s, n in layers for i in range(n)),
        "norms": norm_parameters(spec),
        "head": head_parameters(spec),
    }


def non_embedding_parameters(spec: Spec) -> int:
    """N of the 2·N-FLOPs-per-token rule: attention, MLP and norms; not the embeddings, not the head."""
    g = parameter_groups(spec)
    return g["attention"] + g["mlp"] + g["norms"]
