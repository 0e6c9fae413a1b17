"""Cross-attention and mixture-of-experts formulas, by hand (no adapter produces these routes yet)."""

from __future__ import annotations

from tracer.arch.spec import Spec
from tracer.cost.counts import BLOCK, DECODER, Pass, Stack, block_steps, pass_costs
from tracer.cost.extra import (MoE, cross_attention_formulas, cross_kv_cache_bytes, moe_formulas, moe_parameters)


def small(**over) -> Spec:
    """d_model 8, 4 heads of 2 sharing 2 kv heads, plain relu MLP of 16, vocab 10, two layers, learned positions."""
    fields = dict(family="test", d_model=8, n_layers=2, n_heads=4, n_kv_heads=2, d_head=2, d_ff=16, vocab_size=10,
                  max_positions=32, norm="layernorm", norm_eps=1e-5, positions="learned", rope=None, mlp="plain",
                  activation="relu")
    fields.update(over)
    return Spec(**fields)


def test_cross_attention_prefill_by_hand():
    f = cross_attention_formulas(enc_len=5, kv_cached=False)
    s, p = small(), Pass(batch=2, q_len=3)
    assert f["cross_attn.q"](s, p, 0).macs == 2 * 3 * 8 * 8  # decoder positions * d_model * heads*d_head
    assert f["cross_attn.k"](s, p, 0).macs == 2 * 5 * 8 * 4  # encoder positions * d_model * kv_heads*d_head
    # every decoder query against every encoder position: 3 * 5 pairs per row and head
    assert f["cross_attn.scores"](s, p, 0).macs == 2 * 4 * 15 * 2
    assert f["cross_attn.z"](s, p, 0).macs == 2 * 4 * 15 * 2
    assert f["cross_attn.weights"](s, p, 0).elementwise == 2 * 4 * 15 * 5
    assert f["cross_attn.out"](s, p, 0).macs == 2 * 3 * 8 * 8


def test_cross_attention_decoding_reads_the_encoders_keys_from_the_cache():
    f = cross_attention_formulas(enc_len=5, kv_cached=True)
    s, p = small(), Pass(batch=1, q_len=1, past=7)
    assert f["cross_attn.k"](s, p, 0).flops == 0 and f["cross_attn.v"](s, p, 0).weight_bytes == 0
    assert f["cross_attn.scores"](s, p, 0).macs == 4 * 5 * 2  # one query, all 5 encoder keys: past does not matter
    assert cross_kv_cache_bytes(s, batch=1, enc_len=5, itemsize=4) == 2 * 2 * 2 * 2 * 5 * 4


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
                  else st for st in DECODER)
    spec = small(mlp="gated", activation="silu")
    costs = {c.name: c for c in pass_costs(spec, Pass(1, 3), route=route)}
    assert "blocks.1.mlp.pre" not in costs and "logits" in costs
    assert costs["blocks.1.mlp.experts"].macs == 3 * 1 * 3 * 8 * 16
    dense = {c.name: c for c in pass_costs(spec, Pass(1, 3))}
    assert dense["blocks.1.mlp.pre"].macs == 3 * 8 * 16 and costs["blocks.1.attn.q"] == dense["blocks.1.attn.q"]
