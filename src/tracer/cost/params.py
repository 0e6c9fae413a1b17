"""Parameters by group, from the Spec alone: embeddings, attention, MLP, norms, head (a tied head once)."""

from __future__ import annotations

from tracer.arch.spec import Spec

GROUPS = ("embeddings", "attention", "mlp", "norms", "head")


def embedding_parameters(spec: Spec) -> int:
    tokens = spec.vocab_size * spec.d_model
    if spec.positions == "learned":  # OPT stores `position_offset` extra rows
        return tokens + (spec.max_positions + spec.position_offset) * spec.d_model
    return tokens


def attention_parameters(spec: Spec) -> int:
    """One layer: W_q, W_k, W_v, W_o and their biases."""
    q, kv, d = spec.n_heads * spec.d_head, spec.n_kv_heads * spec.d_head, spec.d_model
    weights = d * q + 2 * d * kv + q * d
    return weights + (q + 2 * kv if spec.qkv_bias else 0) + (d if spec.o_bias else 0)


def mlp_parameters(spec: Spec) -> int:
    """One layer: gate (and up when gated) and down, with their biases."""
    d, f = spec.d_model, spec.d_ff
    ins = 2 if spec.mlp == "gated" else 1
    return (ins + 1) * d * f + ((ins * f + d) if spec.mlp_bias else 0)


def norm_parameters(spec: Spec) -> int:
    """Two norms per layer and the final norm: a weight (and a bias for layernorm) of d_model each."""
    per_norm = spec.d_model * (2 if spec.norm == "layernorm" else 1)
    return (2 * spec.n_layers + (1 if spec.final_norm else 0)) * per_norm


def head_parameters(spec: Spec) -> int:
    """The unembedding; a head tied to the embedding is counted there, once."""
    return (0 if spec.tied_embeddings else spec.d_model * spec.vocab_size) + (spec.vocab_size if spec.head_bias else 0)


def parameter_groups(spec: Spec) -> dict[str, int]:
    return {
        "embeddings": embedding_parameters(spec),
        "attention": spec.n_layers * attention_parameters(spec),
        "mlp": spec.n_layers * mlp_parameters(spec),
        "norms": norm_parameters(spec),
        "head": head_parameters(spec),
    }


def non_embedding_parameters(spec: Spec) -> int:
    """N of the 2·N-FLOPs-per-token rule: attention, MLP and norms; not the embeddings, not the head."""
    g = parameter_groups(spec)
    return g["attention"] + g["mlp"] + g["norms"]
