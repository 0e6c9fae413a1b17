"""Formulas for routes no adapter produces yet: cross-attention (encoder-decoder) and mixture-of-experts MLPs.

They plug into a `Stack` like the decoder's formulas: each returns a dict step -> Formula over the same
(spec, pass, layer) arguments, so a route is extended by merging dicts and listing the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracer.arch.spec import Spec
from tracer.cost.counts import (ACTIVATION_OPS, SOFTMAX_OPS, Formula, Pass, StepCost, elementwise, matmul)
from tracer.cost.params import attention_parameters

# ---------- cross-attention: queries from the decoder, keys and values from the encoder ----------


def cross_attention_formulas(enc_len: int, kv_cached: bool) -> dict[str, Formula]:
    """`decoder.blocks.{i}.cross_attn.*` for a decoder pass `p` over an encoder output of enc_len positions.

    The encoder's keys and values are projected once per input (the prefill); a decoding step reads them
    from the cross-attention cache (`kv_cached`), so its k and v cost nothing but that read. Every decoder
    query sees every encoder position (no causal mask): pairs = q_len · enc_len per row and head.
    """

    def q(spec: Spec, p: Pass, layer) -> StepCost:
        return matmul(p, p.tokens, spec.d_model, spec.n_heads * spec.d_head, spec.qkv_bias)

    def kv(spec: Spec, p: Pass, layer) -> StepCost:
        if kv_cached:
            return StepCost(kind="matmul")
        return matmul(p, p.batch * enc_len, spec.d_model, spec.n_kv_heads * spec.d_head, spec.qkv_bias)

    def n_pairs(spec: Spec, p: Pass) -> int:
        return p.batch * spec.n_heads * p.q_len * enc_len

    def scores(spec: Spec, p: Pass, layer) -> StepCost:
        n = n_pairs(spec, p)
        return StepCost(kind="matmul", macs=n * spec.d_head, elementwise=n, act_bytes=n * p.itemsize, grows="n·m")

    def masked(spec: Spec, p: Pass, layer) -> StepCost:
        return elementwise(p, n_pairs(spec, p), 1, grows="n·m")

    def weights(spec: Spec, p: Pass, layer) -> StepCost:
        return elementwise(p, n_pairs(spec, p), SOFTMAX_OPS, grows="n·m")

    def z(spec: Spec, p: Pass, layer) -> StepCost:
        return StepCost(kind="matmul", macs=n_pairs(spec, p) * spec.d_head,
                        act_bytes=p.tokens * spec.n_heads * spec.d_head * p.itemsize, grows="n·m")

    def out(spec: Spec, p: Pass, layer) -> StepCost:
        return matmul(p, p.tokens, spec.n_heads * spec.d_head, spec.d_model, spec.o_bias)

    return {"cross_attn.q": q, "cross_attn.k": kv, "cross_attn.v": kv, "cross_attn.scores": scores,
            "cross_attn.masked_scores": masked, "cross_attn.weights": weights, "cross_attn.z": z, "cross_attn.out": out}


def cross_attention_parameters(spec: Spec) -> int:
    """One layer's cross-attention projections: the same shapes as self-attention's."""
    return attention_parameters(spec)


def cross_kv_cache_bytes(spec: Spec, batch: int, enc_len: int, itemsize: int) -> int:
    """The encoder's keys and values, cached once per input for every decoder layer."""
    return batch * spec.n_layers * 2 * spec.n_kv_heads * spec.d_head * enc_len * itemsize


# ---------- mixture of experts: a router picks top_k of n_experts MLPs per token ----------


@dataclass(frozen=True)
class MoE:
    n_experts: int
    top_k: int
    d_ff_expert: int
    n_shared: int = 0  # always-on shared experts (DeepSeek, Qwen-MoE), each of d_ff_shared
    d_ff_shared: int = 0


def expert_parameters(spec: Spec, d_ff: int) -> int:
    """One expert MLP of width d_ff: gate (and up when gated) and down, with biases."""
    ins = 2 if spec.mlp == "gated" else 1
    return (ins + 1) * spec.d_model * d_ff + ((ins * d_ff + spec.d_model) if spec.mlp_bias else 0)


def moe_parameters(spec: Spec, moe: MoE) -> dict[str, int]:
    """One layer: all parameters, and those a single token uses (router, its top_k experts, shared experts)."""
    router = spec.d_model * moe.n_experts
    shared = moe.n_shared * expert_parameters(spec, moe.d_ff_shared)
    expert = expert_parameters(spec, moe.d_ff_expert)
    return {"total": router + moe.n_experts * expert + shared, "active": router + moe.top_k * expert + shared}


def _expert_mlp(spec: Spec, p: Pass, tokens_through: int, d_ff: int, experts_read: int) -> StepCost:
    """tokens_through token-expert pairs through MLPs of width d_ff; experts_read distinct experts' weights read."""
    ins = 2 if spec.mlp == "gated" else 1
    act = ACTIVATION_OPS[spec.activation] + (1 if spec.mlp == "gated" else 0)
    biases = (ins * d_ff + spec.d_model) if spec.mlp_bias else 0
    return StepCost(kind="matmul", macs=tokens_through * (ins + 1) * spec.d_model * d_ff,
                    elementwise=tokens_through * (d_ff * act + biases),
                    weight_bytes=experts_read * expert_parameters(spec, d_ff) * p.itemsize,
                    act_bytes=p.tokens * spec.d_model * p.itemsize)


def moe_formulas(moe: MoE) -> dict[str, Formula]:
    """`blocks.{i}.mlp.router.*`, the routed experts, and the shared experts (when there are any).

    Weights read by the routed experts: every expert some token picks, at most min(n_experts,
    tokens · top_k); exact for one token (its top_k are distinct), an upper bound for a prefill.
    """

    def router_logits(spec: Spec, p: Pass, layer) -> StepCost:
        return matmul(p, p.tokens, spec.d_model, moe.n_experts, False)

    def router_weights(spec: Spec, p: Pass, layer) -> StepCost:  # softmax over experts, then the top-k pick
        return StepCost(kind="elementwise", elementwise=p.tokens * moe.n_experts * (SOFTMAX_OPS + 1),
                        act_bytes=p.tokens * moe.top_k * p.itemsize)

    def experts(spec: Spec, p: Pass, layer) -> StepCost:
        through = p.tokens * moe.top_k
        cost = _expert_mlp(spec, p, through, moe.d_ff_expert, min(moe.n_experts, through))
        mix = through * spec.d_model  # weight each expert's output and sum them
        return StepCost(kind="matmul", macs=cost.macs, elementwise=cost.elementwise + 2 * mix,
                        weight_bytes=cost.weight_bytes, act_bytes=cost.act_bytes)

    def shared(spec: Spec, p: Pass, layer) -> StepCost:
        return _expert_mlp(spec, p, p.tokens * moe.n_shared, moe.d_ff_shared, moe.n_shared)

    out = {"mlp.router.logits": router_logits, "mlp.router.weights": router_weights, "mlp.experts": experts}
    if moe.n_shared:
        out["mlp.shared"] = shared
    return out
