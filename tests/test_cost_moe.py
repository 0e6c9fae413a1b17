"""Mixture-of-experts formulas, by hand (no adapter produces MoE specs yet)."""

from __future__ import annotations

from tracer.arch.spec import Spec
from tracer.cost.counts import BLOCK, Pass, block_steps
from tracer.cost.moe import MoE, moe_formulas, moe_parameters
from tracer.cost.routes import SINGLE, Stack, pass_costs


def small(**over) -> Spec:
    """d_model 8, 4 heads of 2 sharing 2 kv heads, plain relu MLP of 16, vocab 10, two layers, learned positions."""
    fields = dict(family="test", d_model=8, n_layers=2, n_heads=4, n_kv_heads=2, d_head=2, d_ff=16, vocab_size=10,
                  max_positions=32, norm="layernorm", norm_eps=1e-5, positions="learned", rope=None, mlp="plain",
                  activation="relu")
    fields.update(over)
    return Spec(**fields)


def test_moe_by_hand():
    moe = MoE(n_experts=8, top_k=2, d_ff_expert=16)
    s = small(mlp="gated", activation="silu")
    f = moe_formulas(moe)
    one = Pass(batch=1, q_len=1)
    assert f["mlp.router.logits"](s, one, 0).macs == 8 * 8
    experts = f["mlp.experts"](s, one, 0)
    assert experts.macs == 2 * 3 * 8 * 16  # two experts, each gate + up + down of 8 x 16
    assert experts.weight_bytes == 2 * 3 * 8 * 16 * 4  # one token reads only its two experts
    many = f["mlp.experts"](s, Pass(batch=1, q_len=100), 0)
    assert many.macs == 100 * 2 * 3 * 8 * 16 and many.weight_bytes == 8 * 3 * 8 * 16 * 4  # all 8 experts, at most
    params = moe_parameters(s, moe)
    assert params == {"total": 8 * 8 + 8 * 3 * 8 * 16, "active": 8 * 8 + 2 * 3 * 8 * 16}
    shared = moe_formulas(MoE(8, 2, 16, n_shared=1, d_ff_shared=32))["mlp.shared"](s, one, 0)
    assert shared.macs == 3 * 8 * 32


def test_a_route_is_extended_by_stacks_of_formulas():
    """How MoE joins: a block stack whose MLP steps are the MoE formulas; the other stacks are the decoder's."""
    moe = MoE(n_experts=4, top_k=1, d_ff_expert=16)

    def steps(spec):
        return tuple(s for s in block_steps(spec) if not s.startswith("mlp.")) + tuple(moe_formulas(moe))

    route = tuple(Stack("blocks", steps, {**BLOCK, **moe_formulas(moe)}, prefix="blocks.{i}.") if st.name == "blocks"
                  else st for st in SINGLE)
    spec = small(mlp="gated", activation="silu")
    costs = {c.name: c for c in pass_costs(spec, Pass(1, 3), route=route)}
    assert "blocks.1.mlp.pre" not in costs and "logits" in costs
    assert costs["blocks.1.mlp.experts"].macs == 3 * 1 * 3 * 8 * 16
    dense = {c.name: c for c in pass_costs(spec, Pass(1, 3))}
    assert dense["blocks.1.mlp.pre"].macs == 3 * 8 * 16 and costs["blocks.1.attn.q"] == dense["blocks.1.attn.q"]
