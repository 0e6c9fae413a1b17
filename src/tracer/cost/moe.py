"""Mixture-of-experts MLPs: a router picks top_k of n_experts MLPs per token.

The formulas plug into a `Stack` like the others (routes.py): a dict step -> Formula over the same
(spec, pass, layer) arguments, so MoE blocks are the block formulas with these in place of the MLP's.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracer.arch.spec import Spec
from tracer.cost.counts import ACTIVATION_OPS, SOFTMAX_OPS, Formula, Pass, StepCost, matmul


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


def engine_moe_formulas() -> dict[str, Formula]:
    """The MoE steps the engine records (mixtral, qwen2_moe, qwen3_moe), read from `spec.moe`: the router's
    logits, its top-k pick and weights, the chosen experts' outputs, qwen2_moe's shared expert and its gate,
    and mlp.out (their weighted sum)."""

    def logits(spec: Spec, p: Pass, layer) -> StepCost:
        return matmul(p, p.tokens, spec.d_model, spec.moe.n_experts, False)

    def experts(spec: Spec, p: Pass, layer) -> StepCost:  # softmax over the experts, the top-k pick
        return StepCost(kind="elementwise", elementwise=p.tokens * spec.moe.n_experts * (SOFTMAX_OPS + 1),
                        act_bytes=p.tokens * spec.moe.top_k * p.itemsize)

    def weights(spec: Spec, p: Pass, layer) -> StepCost:  # gathered (and renormalised)
        n = p.tokens * spec.moe.top_k
        return StepCost(kind="elementwise", elementwise=n * (2 if spec.moe.normalize else 0), act_bytes=n * p.itemsize)

    def expert_out(spec: Spec, p: Pass, layer) -> StepCost:
        through = p.tokens * spec.moe.top_k
        cost = _expert_mlp(spec, p, through, spec.moe.d_expert, min(spec.moe.n_experts, through))
        cost.act_bytes = through * spec.d_model * p.itemsize
        return cost

    def shared_out(spec: Spec, p: Pass, layer) -> StepCost:  # qwen2_moe: one gated MLP on every token
        cost = _expert_mlp(spec, p, p.tokens, spec.moe.d_shared, 1)
        cost.act_bytes = p.tokens * spec.d_model * p.itemsize
        return cost

    def shared_gate(spec: Spec, p: Pass, layer) -> StepCost:  # sigmoid(x @ W_gate): one scalar per token
        cost = matmul(p, p.tokens, spec.d_model, 1, False)
        cost.elementwise += p.tokens * ACTIVATION_OPS["silu"]  # sigmoid: negate, exp, add, divide, as silu
        return cost

    def out(spec: Spec, p: Pass, layer) -> StepCost:  # weight each chosen expert's output and sum them
        shared = 2 * p.tokens * spec.d_model if spec.moe.d_shared else 0  # + gate * shared expert
        return StepCost(kind="elementwise", elementwise=2 * p.tokens * spec.moe.top_k * spec.d_model + shared,
                        act_bytes=p.tokens * spec.d_model * p.itemsize)

    return {"mlp.router.logits": logits, "mlp.router.experts": experts, "mlp.router.weights": weights,
            "mlp.expert_out": expert_out, "mlp.shared.out": shared_out, "mlp.shared.gate": shared_gate, "mlp.out": out}
